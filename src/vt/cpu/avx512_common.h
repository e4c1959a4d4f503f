// Helpers of the kernel files compiled with AVX-512 (matmul/gemm_avx512.cpp, matmul/gemm_amx.cpp,
// and through simd_vec.h the *_avx512.cpp vector kernels), and only for them: fp8 (e4m3fn) -> BF16 decoding in registers, lane masks. Internal linkage on
// purpose, as in matmul/local.h: each ISA file gets its own copy. Include it first.
#pragma once

#include <immintrin.h>

// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialisation, which
// -Wuninitialized reports wherever they are inlined (here and in the including file).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cstdint>

namespace vt::cpu::matmul {
namespace {

// BF16 bits of the e4m3fn magnitude code i (0..127), from the format: exponent field 0
// is subnormal (i * 2^-9, normalised here), 0x7F is NaN. Computed without any shared
// inline function so that nothing compiled for AVX-512 can be picked by the linker for
// code meant to run anywhere.
constexpr uint16_t Fp8MagnitudeToBf16(int i) {
  const int e = i >> 3, m = i & 7;
  if (i == 0x7F) return 0x7FC0;
  if (e != 0) return static_cast<uint16_t>(((e + 120) << 7) | (m << 4));
  if (m == 0) return 0;
  const int p = m >= 4 ? 2 : (m >= 2 ? 1 : 0);  // leading bit of the subnormal mantissa
  return static_cast<uint16_t>(((p - 9 + 127) << 7) | ((m - (1 << p)) << (7 - p)));
}

struct Fp8Bf16Table {
  alignas(64) uint16_t v[128];
};
constexpr Fp8Bf16Table kFp8Bf16 = [] {
  Fp8Bf16Table t{};
  for (int i = 0; i < 128; ++i) t.v[i] = Fp8MagnitudeToBf16(i);
  return t;
}();

// fp8 -> BF16 (exact, unscaled) for 64 codes by table, with AVX512-VBMI byte permutes:
// one 128-entry permute gives the low bytes, one the high bytes (the sign is copied into
// them), and byte unpacking interleaves them into words. The unpack works within 128-bit
// lanes, so the 64 values come out as [0..7, 16..23, 32..39, 48..55] in the first vector
// and [8..15, 24..31, 40..47, 56..63] in the second: a fixed permutation of K that a and
// b share (both are packed from 64-aligned K offsets), which a dot product ignores.
struct Fp8ToBf16Lut {
  __m512i lo0, lo1, hi0, hi1;
  __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));

  __attribute__((target("avx512vbmi"))) Fp8ToBf16Lut() {
    alignas(64) uint8_t lo[128], hi[128];
    for (int i = 0; i < 128; ++i) {
      lo[i] = static_cast<uint8_t>(kFp8Bf16.v[i] & 0xFF);
      hi[i] = static_cast<uint8_t>(kFp8Bf16.v[i] >> 8);
    }
    lo0 = _mm512_load_si512(lo);
    lo1 = _mm512_load_si512(lo + 64);
    hi0 = _mm512_load_si512(hi);
    hi1 = _mm512_load_si512(hi + 64);
  }

  __attribute__((target("avx512vbmi"))) void operator()(__m512i x, uint16_t* d) const {
    const __m512i lo = _mm512_permutex2var_epi8(lo0, x, lo1);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, x, hi1), x, sign, 0xF8);
    _mm512_storeu_si512(d, _mm512_unpacklo_epi8(lo, hi));
    _mm512_storeu_si512(d + 32, _mm512_unpackhi_epi8(lo, hi));
  }

  // The same decode into two registers (K order as stored by operator()).
  __attribute__((target("avx512vbmi"), always_inline)) void Decode(__m512i x, __m512i& w0, __m512i& w1) const {
    const __m512i lo = _mm512_permutex2var_epi8(lo0, x, lo1);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, x, hi1), x, sign, 0xF8);
    w0 = _mm512_unpacklo_epi8(lo, hi);
    w1 = _mm512_unpackhi_epi8(lo, hi);
  }
};

// 16 fp8 codes -> 16 halves equal to value * 2^-8 (the fp8 -> f16 trick of
// matmul/gemm_avx512.cpp: sign-extend, shift left by 7, clear bit 14; NaN codes become a
// half NaN). Also the attention kernels' fp8 decode (simd_vec.h, DecodeFp8Over256).
inline __m256i Fp8ToHalf16(__m128i x) {
  const __m256i s = _mm256_cvtepi8_epi16(x);
  const __m256i h = _mm256_and_si256(_mm256_slli_epi16(s, 7), _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
  const __mmask16 nan =
      _mm_cmpeq_epi8_mask(_mm_or_si128(x, _mm_set1_epi8(static_cast<char>(0x80))), _mm_set1_epi8(-1));
  return _mm256_mask_mov_epi16(h, nan, _mm256_set1_epi16(0x7E00));
}

// Fp8ToHalf16 for codes known to hold no NaN (a NaN code would come out as a finite half).
inline __m256i Fp8ToHalf16NoNaN(__m128i x) {
  return _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(x), 7), _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
}

// Sums of the 16 lanes of each of a0..a3, as [sum a0, sum a1, sum a2, sum a3] (also the
// attention kernels' four-key scores, simd_vec.h SumLanes4).
inline __m128 Hsum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  const __m512d d0 = _mm512_castps_pd(t0), d1 = _mm512_castps_pd(t1);
  const __m512 u = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(d0, d1)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(d0, d1)));
  const __m256 v = _mm256_add_ps(_mm512_castps512_ps256(u), _mm512_extractf32x8_ps(u, 1));
  return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
}

// c[i * ldc + j * cs] = the lane sum of acc[i][j], for i < MR, j < NR <= 4 (Hsum4).
template <int MR, int NR>
__attribute__((always_inline)) inline void StoreSums(__m512 (&acc)[MR][NR], float* c, int64_t ldc, int64_t cs) {
  for (int i = 0; i < MR; ++i) {
    __m512 r[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int j = 0; j < NR; ++j) r[j] = acc[i][j];
    alignas(16) float v[4];
    _mm_store_ps(v, Hsum4(r[0], r[1], r[2], r[3]));
    for (int j = 0; j < NR; ++j) c[i * ldc + j * cs] = v[j];
  }
}

// Masks of the first `left` lanes (none when left <= 0: padding past the row end).
inline __mmask32 Mask32(int64_t left) {
  return left >= 32 ? ~__mmask32{0} : left <= 0 ? 0 : ((__mmask32{1} << left) - 1);
}
inline __mmask64 Mask64(int64_t left) {
  return left >= 64 ? ~__mmask64{0} : left <= 0 ? 0 : ((__mmask64{1} << left) - 1);
}

}  // namespace
}  // namespace vt::cpu::matmul
