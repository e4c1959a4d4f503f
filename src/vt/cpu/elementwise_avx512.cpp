// The elementwise vector kernels at avx512 width (see elementwise_simd.h).
//
// simd_vec.h turns contraction off: a multiply feeding an add must stay two roundings, as
// in the scalar reference (the fused recipes promise the same bytes on every path).
#include "vt/cpu/elementwise_simd.h"

namespace vt::cpu::elementwise {

const KernelSet* Avx512Kernels() {
  static constexpr KernelSet kSet = {"avx512", &avx512::QuantFp8, &avx512::Cast, &avx512::RmsNormRows,
                                     &avx512::RmsNormGatedRows, &avx512::SiluMulRows, &avx512::RopeRow,
                                     &avx512::QuantFp8Groups};
  return &kSet;
}

}  // namespace vt::cpu::elementwise
