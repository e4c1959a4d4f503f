// The AVX2 decodes of fp8 weight codes (Fp8StreamDecode, matmul/kernels.h), shared by the
// files compiled for AVX2 (matmul/gemm_avx2.cpp, matmul/packed_avx2.cpp,
// matmul/fp8_group_scaled_avx2.cpp). Internal linkage, as matmul/local.h explains.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace vt::cpu::matmul {
namespace {

// kF32Bits: the weights come out as value * 2^-120 (the half trick's 2^-8 times 2^-112),
// so a is multiplied by 2^112 when prepared: every product is a·b·2^-16, as with the half
// trick, exact and far from the f32 limits (|a·b| <= 448², fp8 products >= 2^-18).
constexpr float kF32BitsAScale = 0x1p112f;
// Prepared rows are padded to whole 16-value steps; within each step the even K offsets
// come first, then the odd ones (the order the decode gives the weights in).
inline int64_t F32BitsLda(int64_t lda) { return (lda + 15) / 16 * 16; }

// 16 fp8 codes -> their values * 2^-120 as f32: w0 the even codes (0, 2, .., 14), w1 the
// odd ones. Sign-extended to 16 bits, code 2i is the low half of 32-bit lane i and code
// 2i+1 the high half; shifting the lane left by 20 (by 4) puts that code's 7 magnitude
// bits at f32 bits 20..26 (exponent field low bits and mantissa top bits) and copies of
// its sign over bits 27..31; the mask keeps bit 31 and bits 20..26. Exact for every code,
// subnormals included (they become f32 subnormals). Without kNaN the NaN codes come out
// as finite numbers (StreamTile notices them).
template <bool kNaN>
inline void Fp8ToF32BitsX16(__m128i x, __m256& w0, __m256& w1) {
  const __m256i s = _mm256_cvtepi8_epi16(x);
  const __m256i keep = _mm256_set1_epi32(static_cast<int>(0x87F00000u));
  __m256i e = _mm256_and_si256(_mm256_slli_epi32(s, 20), keep);
  __m256i o = _mm256_and_si256(_mm256_slli_epi32(s, 4), keep);
  if constexpr (kNaN) {
    const __m256i mag = _mm256_set1_epi32(0x7FFFFFFF), nan_bits = _mm256_set1_epi32(0x07F00000);
    const __m256i qnan = _mm256_set1_epi32(0x7FC00000);
    e = _mm256_blendv_epi8(e, qnan, _mm256_cmpeq_epi32(_mm256_and_si256(e, mag), nan_bits));
    o = _mm256_blendv_epi8(o, qnan, _mm256_cmpeq_epi32(_mm256_and_si256(o, mag), nan_bits));
  }
  w0 = _mm256_castsi256_ps(e);
  w1 = _mm256_castsi256_ps(o);
}

// 16 fp8 codes -> 16 f32 (value * 2^-8) in w0 (codes 0..7) and w1 (8..15). Without kNaN
// the NaN codes (S.1111.111) come out as finite numbers (StreamTile notices them).
template <bool kNaN>
inline void Fp8ToF32x16(__m128i x, __m256& w0, __m256& w1) {
  const __m256i s = _mm256_cvtepi8_epi16(x);
  __m256i f = _mm256_and_si256(_mm256_slli_epi16(s, 7), _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
  if constexpr (kNaN) {
    const __m256i nan =
        _mm256_cmpeq_epi16(_mm256_and_si256(f, _mm256_set1_epi16(0x7FFF)), _mm256_set1_epi16(0x3F80));
    f = _mm256_blendv_epi8(f, _mm256_set1_epi16(0x7E00), nan);
  }
  w0 = _mm256_cvtph_ps(_mm256_castsi256_si128(f));
  w1 = _mm256_cvtph_ps(_mm256_extracti128_si256(f, 1));
}

}  // namespace
}  // namespace vt::cpu::matmul
