#include "vt/cpu/matmul/packed_copy.h"

#include <sys/mman.h>

#include "vt/error.h"

namespace vt::cpu::matmul {

namespace {
std::atomic<int64_t> g_packed_copies{0};
}  // namespace

bool PackedCopy::Map(size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20, kPage = 4096;
  const size_t size = (bytes + kPage - 1) / kPage * kPage;
  const size_t span = size >= kHuge ? size + kHuge : size;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return false;
  auto* p = static_cast<uint8_t*>(raw);
  if (span > size) {  // keep a 2 MiB-aligned `size` bytes of the span
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    auto* aligned = reinterpret_cast<uint8_t*>((start + kHuge - 1) / kHuge * kHuge);
    if (aligned > p) ::munmap(p, static_cast<size_t>(aligned - p));
    const size_t tail = span - static_cast<size_t>(aligned - p) - size;
    if (tail > 0) ::munmap(aligned + size, tail);
    p = aligned;
    ::madvise(p, size, MADV_HUGEPAGE);
  }
  bytes_ = p;
  size_ = size;
  return true;
}

void PackedCopy::Unmap() {
  if (bytes_ != nullptr) ::munmap(bytes_, size_);
  bytes_ = nullptr;
}

bool PackRows(CpuQueue& cq, const PackedKernels& pk, const uint8_t* b, int64_t N, int64_t K, PackedCopy& copy) {
  const size_t bytes = pk.bytes(N, K);
  VT_CHECK(copy.Map(bytes), "PrepareWeight: cannot allocate ", bytes, " bytes to re-lay out a ", DTypeName(pk.dtype),
           " weight [", N, ", ", K, "]");
  const int64_t blocks = (N + pk.block_cols - 1) / pk.block_cols;
  std::atomic<int64_t> nan{0};
  cq.pool.ParallelFor(blocks, 1, [&](int64_t j0, int64_t j1) { nan += pk.pack(b, N, K, j0, j1, copy.bytes()); });
  if (nan > 0) {
    copy.Unmap();
    return false;
  }
  g_packed_copies.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t PackedCopiesMade() { return g_packed_copies.load(std::memory_order_relaxed); }

}  // namespace vt::cpu::matmul
