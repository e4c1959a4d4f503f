// The attention vector kernel at avx512 width (see attention_simd.h).
#include "vt/cpu/attention_prefill_simd.h"
#include "vt/cpu/attention_simd.h"

namespace vt::cpu::attention {

const KernelSet* Avx512Kernels() {
  static constexpr KernelSet kSet = {"avx512", avx512::kLanes, &avx512::AttendBlock, &avx512::AttendRows,
                                     &avx512::CacheToF32, &avx512::AttendTile,
                                     &avx512::QuantizeToCache};
  return &kSet;
}

}  // namespace vt::cpu::attention
