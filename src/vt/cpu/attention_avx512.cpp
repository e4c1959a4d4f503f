// The attention vector kernel at avx512 width (see attention_simd.h).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "vt/cpu/attention_simd.h"

namespace vt::cpu::attention {

const KernelSet* Avx512Kernels() {
  static constexpr KernelSet kSet = {"avx512", avx512::kLanes, &avx512::AttendBlock};
  return &kSet;
}

}  // namespace vt::cpu::attention
