// The elementwise vector kernels at avx2 width (see elementwise_simd.h).
//
// simd_vec.h turns contraction off: a multiply feeding an add must stay two roundings, as
// in the scalar reference (the fused recipes promise the same bytes on every path).
#include "vt/cpu/elementwise_simd.h"

namespace vt::cpu::elementwise {

const KernelSet* Avx2Kernels() {
  static constexpr KernelSet kSet = {"avx2", &avx2::QuantFp8, &avx2::Cast, &avx2::RmsNormRows,
                                     &avx2::RmsNormGatedRows, &avx2::SiluMulRows, &avx2::RopeRow,
                                     &avx2::QuantFp8Groups};
  return &kSet;
}

}  // namespace vt::cpu::elementwise
