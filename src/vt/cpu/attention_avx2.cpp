// The attention vector kernel at avx2 width (see attention_simd.h).
#include "vt/cpu/attention_prefill_simd.h"
#include "vt/cpu/attention_simd.h"

namespace vt::cpu::attention {

const KernelSet* Avx2Kernels() {
  static constexpr KernelSet kSet = {"avx2", avx2::kLanes, &avx2::AttendBlock, &avx2::AttendRows, nullptr, nullptr,
                                     &avx2::CacheToF32, &avx2::AttendTile,
                                     &avx2::QuantizeToCache};
  return &kSet;
}

}  // namespace vt::cpu::attention
