// The elementwise vector kernels at NEON width (4 f32 lanes; see elementwise_simd.h),
// ARMv8.0-A Advanced SIMD. The kNeonBf16 level runs them too.
//
// simd_vec.h turns contraction off: a multiply feeding an add must stay two roundings, as
// in the scalar reference (the fused recipes promise the same bytes on every path).
#include "vt/cpu/elementwise_simd.h"

namespace vt::cpu::elementwise {

const KernelSet* NeonKernels() {
  static constexpr KernelSet kSet = {"neon", &neon::QuantFp8, &neon::Cast, &neon::RmsNormRows,
                                     &neon::RmsNormGatedRows, &neon::SiluMulRows, &neon::RopeRow,
                                     &neon::QuantFp8Groups};
  return &kSet;
}

}  // namespace vt::cpu::elementwise
