// AVX2 rows of MatmulFp8GroupScaled (block-wise and per-channel scaled fp8; the definition
// is in vt/ops/matmul.h, the driver in matmul/fp8_group_scaled.cpp). fp8 codes are decoded
// 16 at a time in registers (matmul/fp8_decode_avx2.h) and multiplied into 8-lane f32 sums;
// each group's sums are scaled by s_a · s_b (times the decode's 2^8) and added into the
// row's lanes, summed once at the end.
//  - Fp8Rows4GroupDotAvx2, the decode step (one row of a): four weight rows share each load
//    of a; the driver takes them from four quarters of its rows, so that each continues one
//    of four sequential streams (the layout matmul/local.h describes for the static path).
//    Either decode of Fp8StreamDecode, against a prepared for it.
//  - Fp8GroupScaledRowAvx2, one weight row: up to kStreamRows rows of a the row is streamed
//    through the FMAs as it is decoded (the half trick); more rows decode it once into f32.
// A row holding a NaN code (the decodes make it finite) is reported, and the driver
// computes it the portable way.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "vt/cpu/matmul/fp8_decode_avx2.h"
#include "vt/cpu/matmul/kernels.h"

namespace vt::cpu::matmul {

namespace {

constexpr int kStreamRows = 4;

inline float Hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// MR rows of a (lda apart) against one weight row, streamed.
template <int MR>
bool StreamRow(const float* a, int64_t lda, int64_t K, const uint8_t* b, const float* sa, int64_t G,
               const float* sbr, int64_t block_k, float* out) {
  __m256 row[MR];
  for (int i = 0; i < MR; ++i) row[i] = _mm256_setzero_ps();
  __m128i seen = _mm_setzero_si128();
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * block_k, k1 = std::min(K, k0 + block_k);
    __m256 acc0[MR], acc1[MR];
    for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
    auto step = [&](const uint8_t* bp, const float* const* ap) __attribute__((always_inline)) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bp));
      seen = _mm_max_epu8(seen, _mm_and_si128(x, _mm_set1_epi8(0x7F)));
      __m256 w0, w1;
      Fp8ToF32x16<false>(x, w0, w1);
      for (int i = 0; i < MR; ++i) {
        acc0[i] = _mm256_fmadd_ps(_mm256_loadu_ps(ap[i]), w0, acc0[i]);
        acc1[i] = _mm256_fmadd_ps(_mm256_loadu_ps(ap[i] + 8), w1, acc1[i]);
      }
    };
    int64_t k = k0;
    for (; k + 16 <= k1; k += 16) {
      if ((k & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(b + k) + 1024, _MM_HINT_T0);
      const float* ap[MR];
      for (int i = 0; i < MR; ++i) ap[i] = a + i * lda + k;
      step(b + k, ap);
    }
    if (k < k1) {  // the group's tail through zero-padded copies
      alignas(16) uint8_t bt[16] = {};
      alignas(32) float at[MR][16] = {};
      const float* ap[MR];
      std::memcpy(bt, b + k, static_cast<size_t>(k1 - k));
      for (int i = 0; i < MR; ++i) {
        std::memcpy(at[i], a + i * lda + k, static_cast<size_t>(k1 - k) * sizeof(float));
        ap[i] = at[i];
      }
      step(bt, ap);
    }
    for (int i = 0; i < MR; ++i)
      row[i] = _mm256_fmadd_ps(_mm256_add_ps(acc0[i], acc1[i]), _mm256_set1_ps(sa[i * G + g] * sbr[g] * 256.0f), row[i]);
  }
  if (_mm_movemask_epi8(_mm_cmpeq_epi8(seen, _mm_set1_epi8(0x7F))) != 0) return false;
  for (int i = 0; i < MR; ++i) out[i] = Hsum(row[i]);
  return true;
}

}  // namespace

bool Fp8Rows4GroupDotAvx2(const float* a, int64_t K, int64_t G, int64_t block_k, const uint8_t* const* b,
                          const float* const* scale, bool bits, float* out) {
  auto run = [&]<bool kBits>() __attribute__((always_inline)) {
    __m256 row[4], acc[4];
    for (int j = 0; j < 4; ++j) row[j] = _mm256_setzero_ps();
    __m128i seen = _mm_setzero_si128();
    auto step = [&](const float* ap, const uint8_t* const* bp) __attribute__((always_inline)) {
      const __m256 a0 = _mm256_loadu_ps(ap), a1 = _mm256_loadu_ps(ap + 8);
      for (int j = 0; j < 4; ++j) {
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bp[j]));
        seen = _mm_max_epu8(seen, _mm_and_si128(x, _mm_set1_epi8(0x7F)));
        __m256 w0, w1;
        if constexpr (kBits)
          Fp8ToF32BitsX16<false>(x, w0, w1);
        else
          Fp8ToF32x16<false>(x, w0, w1);
        acc[j] = _mm256_fmadd_ps(a0, w0, acc[j]);
        acc[j] = _mm256_fmadd_ps(a1, w1, acc[j]);
      }
    };
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * block_k, k1 = std::min(K, k0 + block_k);
      for (int j = 0; j < 4; ++j) acc[j] = _mm256_setzero_ps();
      int64_t k = k0;
      for (; k + 16 <= k1; k += 16) {
        const uint8_t* bp[4];
        for (int j = 0; j < 4; ++j) {
          bp[j] = b[j] + k;
          // Each row continues a sequential stream (its quarter of the driver's rows).
          if ((k & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(bp[j]) + 1536, _MM_HINT_T0);
        }
        step(a + k, bp);
      }
      if (k < k1) {  // K's tail (the last group): zero codes past K, a is zero-padded
        alignas(16) uint8_t bt[4][16] = {};
        const uint8_t* bp[4];
        for (int j = 0; j < 4; ++j) {
          std::memcpy(bt[j], b[j] + k, static_cast<size_t>(k1 - k));
          bp[j] = bt[j];
        }
        step(a + k, bp);
      }
      for (int j = 0; j < 4; ++j) row[j] = _mm256_fmadd_ps(acc[j], _mm256_set1_ps(scale[j][g]), row[j]);
    }
    if (_mm_movemask_epi8(_mm_cmpeq_epi8(seen, _mm_set1_epi8(0x7F))) != 0) return false;
    for (int j = 0; j < 4; ++j) out[j] = Hsum(row[j]);
    return true;
  };
  return bits ? run.template operator()<true>() : run.template operator()<false>();
}

bool Fp8GroupScaledRowAvx2(const float* a, int64_t M, int64_t K, const uint8_t* b, const float* sa, int64_t G,
                           const float* sbr, int64_t block_k, float* wbuf, float* out) {
  if (M <= kStreamRows) {
    switch (M) {
      case 1: return StreamRow<1>(a, K, K, b, sa, G, sbr, block_k, out);
      case 2: return StreamRow<2>(a, K, K, b, sa, G, sbr, block_k, out);
      case 3: return StreamRow<3>(a, K, K, b, sa, G, sbr, block_k, out);
      default: return StreamRow<4>(a, K, K, b, sa, G, sbr, block_k, out);
    }
  }
  // Decode the row once (value * 2^-8), then each row of a against it.
  __m128i seen = _mm_setzero_si128();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + k));
    seen = _mm_max_epu8(seen, _mm_and_si128(x, _mm_set1_epi8(0x7F)));
    __m256 w0, w1;
    Fp8ToF32x16<false>(x, w0, w1);
    _mm256_storeu_ps(wbuf + k, w0);
    _mm256_storeu_ps(wbuf + k + 8, w1);
  }
  if (k < K) {
    alignas(16) uint8_t bt[16] = {};
    std::memcpy(bt, b + k, static_cast<size_t>(K - k));
    const __m128i x = _mm_load_si128(reinterpret_cast<const __m128i*>(bt));
    seen = _mm_max_epu8(seen, _mm_and_si128(x, _mm_set1_epi8(0x7F)));
    alignas(32) float t[16];
    __m256 w0, w1;
    Fp8ToF32x16<false>(x, w0, w1);
    _mm256_store_ps(t, w0);
    _mm256_store_ps(t + 8, w1);
    std::memcpy(wbuf + k, t, static_cast<size_t>(K - k) * sizeof(float));
  }
  if (_mm_movemask_epi8(_mm_cmpeq_epi8(seen, _mm_set1_epi8(0x7F))) != 0) return false;
  for (int64_t m = 0; m < M; ++m) {
    const float* ar = a + m * K;
    __m256 row = _mm256_setzero_ps();
    float tail = 0.0f;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * block_k, k1 = std::min(K, k0 + block_k);
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
      int64_t j = k0;
      for (; j + 16 <= k1; j += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(ar + j), _mm256_loadu_ps(wbuf + j), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(ar + j + 8), _mm256_loadu_ps(wbuf + j + 8), acc1);
      }
      float t = 0.0f;
      for (; j < k1; ++j) t += ar[j] * wbuf[j];
      const float scale = sa[m * G + g] * sbr[g] * 256.0f;
      row = _mm256_fmadd_ps(_mm256_add_ps(acc0, acc1), _mm256_set1_ps(scale), row);
      tail += t * scale;
    }
    out[m] = Hsum(row) + tail;
  }
  return true;
}

}  // namespace vt::cpu::matmul
