// The elementwise vector kernels at avx2 width (see elementwise_simd.h).
//
// Contraction is off: a multiply feeding an add must stay two roundings, as in the scalar
// reference (the fused recipes promise the same bytes on every path).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "vt/cpu/elementwise_simd.h"

namespace vt::cpu::elementwise {

const KernelSet* Avx2Kernels() {
  static constexpr KernelSet kSet = {"avx2", &avx2::QuantFp8, &avx2::Cast, &avx2::RmsNormRows,
                                     &avx2::RmsNormGatedRows, &avx2::SiluMulRows};
  return &kSet;
}

}  // namespace vt::cpu::elementwise
