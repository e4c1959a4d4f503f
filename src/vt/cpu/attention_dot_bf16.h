// The decode kernel's scores by AVX-512 BF16 dot products (vdpbf16ps), for a BF16 query over
// a BF16 or an F8E4M3 cache: attend_rows_bf16 of the avx512 kernel set, run on the levels with
// AVX-512 BF16 and VBMI (attention.cpp decides). Included by attention_avx512.cpp only.
//
// The query is used as stored, before the softmax scale: each product of two BF16 values is
// exact in f32, the sums round in f32, and a key's score is its sum times score_mul (the
// softmax scale, times k_scale for an F8E4M3 cache) where the other kernel multiplies the
// query by the scale first; both are within the op's accuracy bound. e4m3 codes become
// their exact BF16 values through the VBMI table (Fp8ToBf16Lut, NaN codes NaN), which gives
// the 64 values of a load in a fixed permuted order, so the query is permuted the same way
// once per call. The value rows are widened from BF16 to f32 by a shift (even elements) and
// a mask (odd ones), so the accumulators hold each 64 elements of a head in the kernel's own
// order (KernelOrderIndex), kept across calls; the caller puts them back in order at the
// end (acc_to_natural). The softmax update is AttendPass's (SoftmaxWeights).
#pragma once

#include "vt/cpu/attention_simd.h"

namespace vt::cpu::avx512 {
namespace {

#define VT_DOT_TARGET __attribute__((target("avx512bf16,avx512vbmi")))

// Query vectors per head at most (head size 256).
constexpr int kMaxDotVectors = 8;

// Values per load of a row: 32 BF16 elements, or 64 e4m3 codes (two BF16 vectors).
template <DType kD>
constexpr int64_t DotWidth() {
  return kD == DType::kF8E4M3 ? 64 : 32;
}

// The SpreadPrefetch::Issue steps of one AttendPassDot<kD> over n keys: a score step per
// load of each key row, a value step per key and 64 elements.
template <DType kD>
constexpr int64_t DotPassSteps(int64_t n, int64_t D) {
  return n * (D / DotWidth<kD>()) + n * (D / 64);
}

// Where element p of a head's accumulators (D a multiple of 64) sits in the head's natural
// order: in each 64, the even then the odd elements of the first 32 decoded values, then of
// the next 32; for an F8E4M3 cache the decoded values themselves come in the table's order
// (Fp8ToBf16Lut: [0..7, 16..23, 32..39, 48..55], then [8..15, 24..31, 40..47, 56..63]).
constexpr int64_t KernelOrderIndex(DType cache, int64_t p) {
  const int64_t base = p / 64 * 64, k = p % 64 / 16, i = p % 16;
  const int64_t word = 2 * i + k % 2;  // within the k / 2-th vector of 32 decoded values
  if (cache == DType::kF8E4M3) return base + 16 * (word / 8) + 8 * (k / 2) + word % 8;
  return base + 32 * (k / 2) + word;
}

// 64 elements of a value row (from element 64·c) as four f32 vectors in KernelOrderIndex's
// order: BF16 by shift and mask; e4m3 codes through the table first.
template <DType kD>
VT_DOT_TARGET VT_INLINE void LoadValues64(const matmul::Fp8ToBf16Lut& lut, const char* row, int64_t c, V (&x)[4]) {
  __m512i w0, w1;
  if constexpr (kD == DType::kF8E4M3) {
    lut.Decode(_mm512_loadu_si512(row + c * 64), w0, w1);
  } else {
    w0 = _mm512_loadu_si512(row + c * 128);
    w1 = _mm512_loadu_si512(row + c * 128 + 64);
  }
  const __m512i high = _mm512_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  x[0] = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16));
  x[1] = _mm512_castsi512_ps(_mm512_and_si512(w0, high));
  x[2] = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16));
  x[3] = _mm512_castsi512_ps(_mm512_and_si512(w1, high));
}

// acc[t·D + 64·c ..] (kernel order) += Σ_j s[t][j] · v_j's 64 elements from 64·c, keys in
// order.
template <DType kD, int NH>
VT_DOT_TARGET VT_INLINE void AccumulateValuesDot(const matmul::Fp8ToBf16Lut& lut, const char* v,
                                                 int64_t stride_bytes, const float (*s)[kKeysPerPass], int64_t n,
                                                 int64_t D, float* acc, int64_t c, SpreadPrefetch& pf) {
  V a[NH][4];
  for (int t = 0; t < NH; ++t)
    for (int u = 0; u < 4; ++u) a[t][u] = LoadF32(acc + t * D + c * 64 + u * kLanes);
  for (int64_t j = 0; j < n; ++j) {
    pf.Issue();
    V x[4];
    LoadValues64<kD>(lut, v + j * stride_bytes, c, x);
    for (int t = 0; t < NH; ++t) {
      const V p = Set1(s[t][j]);
      for (int u = 0; u < 4; ++u) a[t][u] = Fma(p, x[u], a[t][u]);
    }
  }
  for (int t = 0; t < NH; ++t)
    for (int u = 0; u < 4; ++u) StoreF32(acc + t * D + c * 64 + u * kLanes, a[t][u]);
}

// Key j's row, load c (DotWidth elements from c·DotWidth) into w0 (and w1 for F8E4M3), as
// BF16 pairs in the order of the query vectors q[2c], q[2c + 1] (F8E4M3) or q[c] (BF16).
template <DType kD>
VT_DOT_TARGET VT_INLINE void LoadKeyBf16(const matmul::Fp8ToBf16Lut& lut, const char* row, int64_t c, __m512i& w0,
                                         __m512i& w1) {
  if constexpr (kD == DType::kF8E4M3) {
    lut.Decode(_mm512_loadu_si512(row + c * 64), w0, w1);
  } else {
    w0 = _mm512_loadu_si512(row + c * 64);
    w1 = w0;
  }
}

template <DType kD, int NH, int KU>
VT_DOT_TARGET VT_INLINE void DotKeys(const matmul::Fp8ToBf16Lut& lut, const __m512i (*q)[kMaxDotVectors], const char* k,
                                     int64_t stride_bytes, int64_t j, int64_t D, float (*s)[kKeysPerPass],
                                     SpreadPrefetch& pf) {
  V a[NH][KU];
  for (int t = 0; t < NH; ++t)
    for (int u = 0; u < KU; ++u) a[t][u] = Zero();
  for (int64_t c = 0; c < D / DotWidth<kD>(); ++c) {
    pf.Issue();
    for (int u = 0; u < KU; ++u) {
      __m512i w0, w1;
      LoadKeyBf16<kD>(lut, k + (j + u) * stride_bytes, c, w0, w1);
      for (int t = 0; t < NH; ++t) {
        if constexpr (kD == DType::kF8E4M3) {
          a[t][u] = _mm512_dpbf16_ps(a[t][u], (__m512bh)q[t][2 * c], (__m512bh)w0);
          a[t][u] = _mm512_dpbf16_ps(a[t][u], (__m512bh)q[t][2 * c + 1], (__m512bh)w1);
        } else {
          a[t][u] = _mm512_dpbf16_ps(a[t][u], (__m512bh)q[t][c], (__m512bh)w0);
        }
      }
    }
  }
  for (int t = 0; t < NH; ++t) SumLanesN<KU>(a[t], &s[t][j]);
}

// AttendPass with the scores by dot products (q[t]: head t's query as BF16 vectors in the
// cache decode's order) and the values widened in the kernel's order.
template <DType kD, int NH>
VT_DOT_TARGET void AttendPassDot(const matmul::Fp8ToBf16Lut& lut, const __m512i (*q)[kMaxDotVectors], float score_mul,
                                 const char* k, const char* v, int64_t stride_bytes, float v_mul, int64_t n,
                                 int64_t D, float* acc, float* m, float* l, SpreadPrefetch& pf) {
  alignas(64) float s[NH][kKeysPerPass];
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) DotKeys<kD, NH, 4>(lut, q, k, stride_bytes, j, D, s, pf);
  for (; j < n; ++j) DotKeys<kD, NH, 1>(lut, q, k, stride_bytes, j, D, s, pf);
  float bm[NH];
  for (int t = 0; t < NH; ++t) {
    bm[t] = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      const float x = s[t][i] * score_mul;
      s[t][i] = x;
      bm[t] = x > bm[t] ? x : bm[t];
    }
  }
  SoftmaxWeights<kD, NH>(s, bm, v_mul, n, D, acc, m, l);
  for (int64_t c = 0; c < D / 64; ++c) AccumulateValuesDot<kD, NH>(lut, v, stride_bytes, s, n, D, acc, c, pf);
}

template <DType kD>
VT_DOT_TARGET void AttendRowsDotAs(const uint16_t* q, float score_mul, int64_t heads, const char* k, const char* v,
                                   int64_t stride_bytes, float v_mul, int64_t valid, int64_t D, float* acc, float* m,
                                   float* l, const attention::PrefetchSpan* ahead) {
  static const matmul::Fp8ToBf16Lut lut;
  // The table decode's order of one load's 64 codes (Fp8ToBf16Lut): [0..7, 16..23, 32..39,
  // 48..55] then [8..15, 24..31, 40..47, 56..63], as word indices into two query vectors.
  alignas(64) static constexpr uint16_t kOrder[64] = {
      0,  1,  2,  3,  4,  5,  6,  7,  16, 17, 18, 19, 20, 21, 22, 23, 32, 33, 34, 35, 36, 37,
      38, 39, 48, 49, 50, 51, 52, 53, 54, 55, 8,  9,  10, 11, 12, 13, 14, 15, 24, 25, 26, 27,
      28, 29, 30, 31, 40, 41, 42, 43, 44, 45, 46, 47, 56, 57, 58, 59, 60, 61, 62, 63};
  const __m512i order0 = _mm512_load_si512(kOrder), order1 = _mm512_load_si512(kOrder + 32);
  int64_t steps = 0;
  for (int64_t j = 0; j < valid; j += kKeysPerPass) {
    const int64_t n = valid - j < kKeysPerPass ? valid - j : kKeysPerPass;
    steps += (heads + kHeadTile - 1) / kHeadTile * DotPassSteps<kD>(n, D);
  }
  SpreadPrefetch pf(ahead, steps);
  __m512i qv[kHeadTile][kMaxDotVectors];
  for (int64_t h = 0; h < heads; h += kHeadTile) {
    const int nh = static_cast<int>(heads - h < kHeadTile ? heads - h : kHeadTile);
    for (int t = 0; t < nh; ++t) {
      const uint16_t* qh = q + (h + t) * D;
      for (int64_t c = 0; c < D / 32; ++c) {
        if constexpr (kD == DType::kF8E4M3) {
          const __m512i lo = _mm512_loadu_si512(qh + (c & ~1) * 32), hi = _mm512_loadu_si512(qh + (c | 1) * 32);
          qv[t][c] = _mm512_permutex2var_epi16(lo, (c & 1) != 0 ? order1 : order0, hi);
        } else {
          qv[t][c] = _mm512_loadu_si512(qh + c * 32);
        }
      }
    }
    for (int64_t j = 0; j < valid; j += kKeysPerPass) {
      const int64_t n = valid - j < kKeysPerPass ? valid - j : kKeysPerPass;
      const char* kp = k + j * stride_bytes;
      const char* vp = v + j * stride_bytes;
      float* ah = acc + h * D;
      switch (nh) {
        case 1:
          AttendPassDot<kD, 1>(lut, qv, score_mul, kp, vp, stride_bytes, v_mul, n, D, ah, m + h, l + h, pf);
          break;
        case 2:
          AttendPassDot<kD, 2>(lut, qv, score_mul, kp, vp, stride_bytes, v_mul, n, D, ah, m + h, l + h, pf);
          break;
        case 3:
          AttendPassDot<kD, 3>(lut, qv, score_mul, kp, vp, stride_bytes, v_mul, n, D, ah, m + h, l + h, pf);
          break;
        default:
          AttendPassDot<kD, 4>(lut, qv, score_mul, kp, vp, stride_bytes, v_mul, n, D, ah, m + h, l + h, pf);
          break;
      }
    }
  }
  pf.Flush();
}

// KernelSet::attend_rows_bf16 (its preconditions are the caller's: DotBf16Fits). acc in
// the kernel's order (KernelOrderIndex).
VT_DOT_TARGET void AttendRowsDotBf16(const uint16_t* q, float scale, int64_t heads, const void* k, const void* v,
                                     int64_t stride, DType dtype, float k_scale, float v_scale, int64_t valid,
                                     int64_t D, float* acc, float* m, float* l,
                                     const attention::PrefetchSpan* ahead) {
  const auto* kb = static_cast<const char*>(k);
  const auto* vb = static_cast<const char*>(v);
  if (dtype == DType::kBF16)
    AttendRowsDotAs<DType::kBF16>(q, scale, heads, kb, vb, stride * 2, 1.0f, valid, D, acc, m, l, ahead);
  else  // the codes' exact values (NaN codes NaN), the scales on the scores and the weights
    AttendRowsDotAs<DType::kF8E4M3>(q, scale * k_scale, heads, kb, vb, stride, v_scale, valid, D, acc, m, l, ahead);
}

// KernelSet::acc_to_natural: heads accumulators of D floats from the kernel's order into
// the natural one.
void AccToNatural(float* acc, int64_t heads, int64_t D, DType cache) {
  float tmp[64];
  for (int64_t base = 0; base < heads * D; base += 64) {
    for (int64_t p = 0; p < 64; ++p) tmp[KernelOrderIndex(cache, p)] = acc[base + p];
    for (int64_t p = 0; p < 64; ++p) acc[base + p] = tmp[p];
  }
}

#undef VT_DOT_TARGET

}  // namespace
}  // namespace vt::cpu::avx512
