#include "vt/core/memory.h"

#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "vt/error.h"

#ifdef VT_WITH_CUDA
#include "vt/cuda/runtime.h"
#endif

namespace vt::detail {

namespace {
// Host tensors of 8 MiB and more (a KV cache's layers, the biggest weights, a long prompt's
// activations) are 2 MiB-aligned and asked to be backed by transparent huge pages
// (MADV_HUGEPAGE: the VMs this project runs on have THP in "madvise" mode). A decode step reads the paged KV cache
// in scattered 16-token blocks; on 4 KiB pages each block's rows cost page walks, and
// huge pages measured 6-20% faster decode attention (bench/README.md, 2026-12-04). (A
// profile of the 16-sequence engine run showed more page clearing than before, 0.5% -> 4-5%
// of the samples, but all of it under the matmul's PackWeights, which maps its own huge
// pages at load.)
constexpr size_t kHuge = size_t{2} << 20, kHugeMin = size_t{8} << 20;
[[noreturn, maybe_unused]] void ThrowNoCuda(const char* what) {
  throw Error(StrCat(what, ": vtllm was built without CUDA (configure with -DVT_CUDA=ON)"));
}
}  // namespace

std::shared_ptr<Storage> AllocateStorage(Device device, size_t nbytes) {
  if (device.is_cuda()) {
#ifdef VT_WITH_CUDA
    return cuda::AllocateStorage(device.index, nbytes);
#else
    ThrowNoCuda("Tensor::Empty on cuda");
#endif
  }
  size_t rounded = (nbytes + 63) / 64 * 64;
  void* p = nullptr;
  if (rounded >= kHugeMin) {
    rounded = (rounded + kHuge - 1) / kHuge * kHuge;
    p = std::aligned_alloc(kHuge, rounded);
#if defined(__linux__)
    if (p != nullptr) ::madvise(p, rounded, MADV_HUGEPAGE);
#endif
  } else if (rounded > 0) {
    p = std::aligned_alloc(64, rounded);
  }
  VT_CHECK(p != nullptr || rounded == 0, "out of host memory allocating ", nbytes, " bytes");
  auto s = std::make_shared<Storage>();
  s->data = p;
  s->nbytes = nbytes;
  s->device = device;
  s->owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  s->allocated_by_vt = true;
  return s;
}

void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n) {
  if (n == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, n);
    return;
  }
#ifdef VT_WITH_CUDA
  cuda::CopyBytes(dst, dst_device, src, src_device, n);
#else
  ThrowNoCuda("copy to or from cuda");
#endif
}

void FinishWrites(Device device) {
  if (device.is_cpu()) return;  // CPU queues finish their work before an op returns
#ifdef VT_WITH_CUDA
  cuda::SynchronizeDevice(device.index);
#else
  ThrowNoCuda("Tensor::SetReadOnly on cuda");
#endif
}

}  // namespace vt::detail
