// The NEON decodes of fp8 (e4m3fn) codes by the half trick (matmul/gemm_avx512.cpp): shared
// by the matmul kernels (matmul/gemm_neon.cpp) and the attention kernels' cache decode
// (simd_vec.h, DecodeFp8Over256). Internal linkage, as matmul/local.h explains.
#pragma once

#include <arm_neon.h>

namespace vt::cpu::matmul {
namespace {

// 8 fp8 codes -> 8 halves equal to value * 2^-8: SSHLL sign-extends each code to 16 bits
// and shifts it left by 7, the mask clears bit 14 (a copy of the sign). Exact for every
// code, subnormals included (they become half subnormals). The NaN codes (S.1111.111) come
// out as finite halves (S.01111.1110000000); Fp8HalfSignedNaN turns them into NaN.
inline uint16x8_t Fp8ToHalf8(int8x8_t s) {
  return vandq_u16(vreinterpretq_u16_s16(vshll_n_s8(s, 7)), vdupq_n_u16(0xBF80));
}

// 16 fp8 codes -> 16 halves (two vectors of 8), each as Fp8ToHalf8.
inline void Fp8ToHalf16(uint8x16_t x, uint16x8_t& h0, uint16x8_t& h1) {
  const int8x16_t s = vreinterpretq_s8_u8(x);
  h0 = Fp8ToHalf8(vget_low_s8(s));
  h1 = vandq_u16(vreinterpretq_u16_s16(vshll_high_n_s8(s, 7)), vdupq_n_u16(0xBF80));
}

// The NaN codes' halves of Fp8ToHalf8 (magnitude 0x3F80) -> the half quiet NaN with the
// code's sign (S.11111.1000000000), which FCVTL widens to Fp8E4M3ToFloat's NaN (0x7FC00000
// with the code's sign); other lanes unchanged.
inline uint16x8_t Fp8HalfSignedNaN(uint16x8_t h) {
  const uint16x8_t mag = vdupq_n_u16(0x7FFF);
  const uint16x8_t nan = vceqq_u16(vandq_u16(h, mag), vdupq_n_u16(0x3F80));
  return vbslq_u16(vandq_u16(nan, mag), vdupq_n_u16(0x7E00), h);
}

inline float32x4_t HalfLo(uint16x8_t h) { return vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h))); }
inline float32x4_t HalfHi(uint16x8_t h) { return vcvt_high_f32_f16(vreinterpretq_f16_u16(h)); }

}  // namespace
}  // namespace vt::cpu::matmul
