// A weight laid out for an outer-product kernel (matmul/kernels.h, PackedKernels), in
// its own mapping; shared by MatmulFp8's and Matmul's prepared weights (matmul.cpp) and
// MatmulFp8GroupScaled's (fp8_group_scaled.cpp), which use the fp8 layout.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "vt/cpu/backend.h"
#include "vt/cpu/matmul/kernels.h"

namespace vt::cpu::matmul {

// Returned to the OS when the weight goes (from malloc, freed copies stayed in the heap: 65
// MB more peak RSS for a Qwen3-0.6B FP8 model), in 2 MiB pages where the OS grants them on
// request: one fault per 2 MiB instead of per 4 KiB while the pack writes it (48 MiB laid
// out in ~50 instead of ~85 ms here).
class PackedCopy {
 public:
  PackedCopy() = default;
  PackedCopy(PackedCopy&& o) noexcept : bytes_(std::exchange(o.bytes_, nullptr)), size_(o.size_) {}
  PackedCopy& operator=(PackedCopy&&) = delete;
  ~PackedCopy() { Unmap(); }

  // Maps at least `bytes` bytes; false when the OS refuses.
  bool Map(size_t bytes);
  void Unmap();
  uint8_t* bytes() const { return bytes_; }

 private:
  uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
};

// Lays out the rows b [N, K] (fp8 or BF16, pk.dtype) into `copy` for `pk` (all threads,
// block by block). False, with nothing kept, where the set's decode cannot keep the NaN
// codes b holds.
bool PackRows(CpuQueue& cq, const PackedKernels& pk, const uint8_t* b, int64_t N, int64_t K, PackedCopy& copy);

}  // namespace vt::cpu::matmul
