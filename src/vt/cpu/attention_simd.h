// attention::KernelSet written once against simd_vec.h; attention_avx512.cpp,
// attention_avx2.cpp and attention_neon.cpp compile it at their width. Products accumulate with fma in
// vector lanes (the portable loops add rounded products instead), and e^x is the vector
// form of numerics::Exp, so results differ from the portable path in the last bits only
// (the attention tests bound every path against a float64 reference).
#pragma once

#include <cmath>
#include <vector>

#include "vt/cpu/attention_kernels.h"
#include "vt/cpu/fp8_nan_scan.h"
#include "vt/cpu/simd_vec.h"

namespace vt::cpu::VT_SIMD_NS {
namespace {

// Keys per pass: their scores wait in a stack array between the passes.
constexpr int64_t kKeysPerPass = 64;
// Query heads sharing one pass over the keys (the rest of a GQA group takes another pass).
constexpr int kHeadTile = 4;

// One query vector against n f32 key and value rows (D apart): a prefill chunk's step over
// a block widened to f32.
void AttendKeys(const float* q, const float* k, const float* v, int64_t n, int64_t D, float* acc, float& m,
                float& l) {
  alignas(64) float s[kKeysPerPass];
  float bm = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    const float* kj = k + j * D;
    V a0 = Zero(), a1 = Zero();
    int64_t i = 0;
    for (; i + 2 * kLanes <= D; i += 2 * kLanes) {
      a0 = Fma(LoadF32(q + i), LoadF32(kj + i), a0);
      a1 = Fma(LoadF32(q + i + kLanes), LoadF32(kj + i + kLanes), a1);
    }
    if (i < D) a0 = Fma(LoadF32(q + i), LoadF32(kj + i), a0);
    s[j] = SumLanes(Add(a0, a1));
    bm = s[j] > bm ? s[j] : bm;
  }
  if (bm > m) {
    // e^-inf = 0 on a row's first keys. (The vector Exp, not the scalar numerics::Exp: an
    // inline function with external linkage compiled here could be the copy the linker
    // keeps for code meant to run on any processor.)
    const V r = Exp(Set1(m - bm));
    for (int64_t i = 0; i < D; i += kLanes) StoreF32(acc + i, Mul(LoadF32(acc + i), r));
    l *= FirstLane(r);
    m = bm;
  }
  const V mv = Set1(m);
  for (int64_t j = 0; j < n; j += kLanes) {
    const int c = n - j < kLanes ? static_cast<int>(n - j) : kLanes;
    StoreN(s, DType::kF32, j, Exp(Sub(LoadN(s, DType::kF32, j, c), mv)), c);
  }
  for (int64_t j = 0; j < n; ++j) l += s[j];
  // acc stays in registers across the keys, a few vectors of it at a time.
  constexpr int kAccVectors = 4;
  for (int64_t i0 = 0; i0 < D; i0 += kAccVectors * kLanes) {
    const int nv = static_cast<int>((D - i0) / kLanes < kAccVectors ? (D - i0) / kLanes : kAccVectors);
    V a[kAccVectors];
    for (int t = 0; t < nv; ++t) a[t] = LoadF32(acc + i0 + t * kLanes);
    for (int64_t j = 0; j < n; ++j) {
      const V p = Set1(s[j]);
      const float* vj = v + j * D + i0;
      for (int t = 0; t < nv; ++t) a[t] = Fma(p, LoadF32(vj + t * kLanes), a[t]);
    }
    for (int t = 0; t < nv; ++t) StoreF32(acc + i0 + t * kLanes, a[t]);
  }
}

void AttendBlock(const float* q, const float* k, const float* v, int64_t valid, int64_t D, float* acc, float& m,
                 float& l) {
  for (int64_t j = 0; j < valid; j += kKeysPerPass) {
    const int64_t n = valid - j < kKeysPerPass ? valid - j : kKeysPerPass;
    AttendKeys(q, k + j * D, v + j * D, n, D, acc, m, l);
  }
}

// kLanes cache elements from element i of a row: F32, BF16 and F16 exactly; e4m3 codes as
// their exact values times 2^-8 (the 2^8·scale of the definition's KvCacheDequantizeFp8 is
// folded into the queries and the softmax weights instead, AttendRowsAs). kNaN false: the
// rows hold no NaN code (AnyFp8NaN), so the decode need not test for one.
template <DType kD, bool kNaN>
VT_INLINE V LoadCache(const void* row, int64_t i) {
  if constexpr (kD == DType::kF8E4M3)
    return DecodeFp8Over256<kNaN>(static_cast<const uint8_t*>(row) + i);
  else
    return Load(row, kD, i);
}

// LoadCache of elements i and i + kLanes (an e4m3 row's 2·kLanes codes decoded together).
template <DType kD, bool kNaN>
VT_INLINE void LoadCachePair(const void* row, int64_t i, V& x0, V& x1) {
  if constexpr (kD == DType::kF8E4M3) {
    DecodeFp8Over256Pair<kNaN>(static_cast<const uint8_t*>(row) + i, x0, x1);
  } else {
    x0 = Load(row, kD, i);
    x1 = Load(row, kD, i + kLanes);
  }
}

// Whether an e4m3 code S.1111.111 (NaN) is among the first D bytes of rows j < n, each
// stride_bytes apart: code | 0x80 == 0xFF. A vector of codes at a time, each lane keeping the
// largest code | 0x80 it has seen (two instructions a vector, the load folded into the OR),
// one compare with 0xFF at the end (AnyFp8NaNCode, a word at a time, for the tail). The scan
// runs on every FP8 call, over its keys and its values: bench/README.md has its share.
inline bool AnyFp8NaN(const char* rows, int64_t stride_bytes, int64_t n, int64_t D) {
#if defined(__AVX512F__)
  constexpr int64_t kW = 64;
  const __m512i top = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i hi = _mm512_setzero_si512();
#elif defined(__AVX2__)
  constexpr int64_t kW = 32;
  const __m256i top = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i hi = _mm256_setzero_si256();
#else
  constexpr int64_t kW = 16;
  const uint8x16_t top = vdupq_n_u8(0x80);
  uint8x16_t hi = vdupq_n_u8(0);
#endif
  const int64_t whole = D / kW * kW;
  for (int64_t j = 0; j < n; ++j) {
    const auto* p = reinterpret_cast<const uint8_t*>(rows + j * stride_bytes);
    for (int64_t i = 0; i < whole; i += kW) {
#if defined(__AVX512F__)
      hi = _mm512_max_epu8(hi, _mm512_or_si512(_mm512_loadu_si512(p + i), top));
#elif defined(__AVX2__)
      hi = _mm256_max_epu8(hi, _mm256_or_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), top));
#else
      hi = vmaxq_u8(hi, vorrq_u8(vld1q_u8(p + i), top));
#endif
    }
    if (whole < D && AnyFp8NaNCode(p + whole, D - whole)) return true;
  }
#if defined(__AVX512F__)
  return _mm512_cmpeq_epi8_mask(hi, _mm512_set1_epi8(-1)) != 0;
#elif defined(__AVX2__)
  return _mm256_movemask_epi8(_mm256_cmpeq_epi8(hi, _mm256_set1_epi8(-1))) != 0;
#else
  return vmaxvq_u8(hi) == 0xFF;
#endif
}

// A PrefetchSpan's requests issued `per` at a time at each step of a call's score and value
// loops (Issue), alternating between its two sources, until all are out.
struct SpreadPrefetch {
  const char* a = nullptr;
  const char* b = nullptr;
  int64_t requests = 0;  // 2 per line: a's and b's
  int64_t next = 0;
  int per = 0;
  // ahead's requests (none for nullptr) over a call of `steps` Issue steps.
  SpreadPrefetch(const attention::PrefetchSpan* ahead, int64_t steps) {
    if (ahead == nullptr || ahead->lines <= 0) return;
    a = ahead->a;
    b = ahead->b;
    requests = 2 * ahead->lines;
    per = static_cast<int>(steps > 0 ? (requests + steps - 1) / steps : requests);
  }
  // Whatever the step estimate left, at the call's end.
  void Flush() {
    per = static_cast<int>(requests);
    Issue();
  }
  VT_INLINE void Issue() {
    for (int u = 0; u < per && next < requests; ++u, ++next)
      __builtin_prefetch(((next & 1) != 0 ? b : a) + (next >> 1) * 64, 0, 2);
  }
};

// Keys one step of AttendPass's score loop takes together, each head's sums of them reduced
// together (SumLanesN): as many as the vector registers hold beside the decode (NH·KU sums,
// KU rows, a query vector).
template <int NH>
constexpr int KeysPerStep() {
  if constexpr (kLanes == 16) return 4;  // AVX-512, 32 registers
  else if constexpr (kLanes == 8) return NH <= 2 ? 4 : 2;  // AVX2, 16 registers
  else return 1;
}

// out[u] = the sum of the lanes of a[u], u < KU.
template <int KU>
VT_INLINE void SumLanesN(const V (&a)[KU], float* out) {
  if constexpr (KU == 4) {
    SumLanes4(a[0], a[1], a[2], a[3], out);
  } else if constexpr (KU == 2) {
    SumLanes2(a[0], a[1], out);
  } else {
    for (int u = 0; u < KU; ++u) out[u] = SumLanes(a[u]);
  }
}

// acc[t·D + i0 ..] += Σ_j s[t][j] · v_j[i0 ..] over NV vectors of each of NH heads, keys
// in order (the value half of AttendPass).
template <DType kD, bool kNaN, int NH, int NV>
VT_INLINE void AccumulateValues(const char* v, int64_t stride_bytes, const float (*s)[kKeysPerPass],
                                int64_t n, int64_t D, float* acc, int64_t i0, SpreadPrefetch& pf) {
  V a[NH][NV];
  for (int t = 0; t < NH; ++t)
    for (int u = 0; u < NV; ++u) a[t][u] = LoadF32(acc + t * D + i0 + u * kLanes);
  for (int64_t j = 0; j < n; ++j) {
    pf.Issue();
    const char* vj = v + j * stride_bytes;
    V x[NV];
    int u = 0;
    for (; u + 2 <= NV; u += 2) LoadCachePair<kD, kNaN>(vj, i0 + u * kLanes, x[u], x[u + 1]);
    if (u < NV) x[u] = LoadCache<kD, kNaN>(vj, i0 + u * kLanes);
    for (int t = 0; t < NH; ++t) {
      const V p = Set1(s[t][j]);
      for (int u = 0; u < NV; ++u) a[t][u] = Fma(p, x[u], a[t][u]);
    }
  }
  for (int t = 0; t < NH; ++t)
    for (int u = 0; u < NV; ++u) StoreF32(acc + t * D + i0 + u * kLanes, a[t][u]);
}

// Vectors of a value row AttendPass's accumulators take at a time (fewer with more heads
// where the registers are few).
template <int NH>
constexpr int AccVectors() {
  return (kLanes == 8 && NH > 2) ? 2 : 4;
}

// The SpreadPrefetch::Issue steps of one AttendPass<.., NH> over n keys.
template <int NH>
constexpr int64_t PassSteps(int64_t n, int64_t D) {
  constexpr int KU = KeysPerStep<NH>();
  const int64_t vectors = D / kLanes, whole = vectors / AccVectors<NH>();
  const int64_t score = KU > 1 ? n / KU * vectors + n % KU : n;
  return score + (whole + vectors % AccVectors<NH>()) * n;
}

template <DType kD, bool kNaN, int NH>
VT_INLINE void FinishPass(float (*s)[kKeysPerPass], const float* bm, const char* v, int64_t stride_bytes, float v_mul,
                          int64_t n, int64_t D, float* acc, float* m, float* l, SpreadPrefetch& pf);

// One pass of at most kKeysPerPass keys for NH query heads (q + t·D, acc + t·D, m[t], l[t]
// for t < NH), each key and value row read from the cache once for all NH heads. The
// softmax weights are multiplied by v_mul before they weight the value rows (an F8E4M3
// cache's 2^8·v_scale; 1 otherwise, and then not multiplied).
template <DType kD, bool kNaN, int NH>
void AttendPass(const float* q, const char* k, const char* v, int64_t stride_bytes, float v_mul, int64_t n,
                int64_t D, float* acc, float* m, float* l, SpreadPrefetch& pf) {
  alignas(64) float s[NH][kKeysPerPass];
  float bm[NH];
  for (int t = 0; t < NH; ++t) bm[t] = -INFINITY;
  int64_t j = 0;
  // KU keys at a time (KeysPerStep): each head's KU sums reduced together, a fraction of the
  // reduction instructions of one key at a time; the KU rows' loads are independent.
  constexpr int KU = KeysPerStep<NH>();
  if constexpr (KU > 1) {
    for (; j + KU <= n; j += KU) {
      V a[NH][KU];
      for (int t = 0; t < NH; ++t)
        for (int u = 0; u < KU; ++u) a[t][u] = Zero();
      int64_t i = 0;
      if constexpr (kD == DType::kF8E4M3 && kLanes == 8) {
        // AVX2: a key's 16 codes widened together (LoadCachePair: one widening for two
        // vectors); each sum still takes the same elements in the same order as below.
        for (; i + 2 * kLanes <= D; i += 2 * kLanes) {
          pf.Issue();
          pf.Issue();
          for (int u = 0; u < KU; ++u) {
            V x0, x1;
            LoadCachePair<kD, kNaN>(k + (j + u) * stride_bytes, i, x0, x1);
            for (int t = 0; t < NH; ++t) {
              a[t][u] = Fma(LoadF32(q + t * D + i), x0, a[t][u]);
              a[t][u] = Fma(LoadF32(q + t * D + i + kLanes), x1, a[t][u]);
            }
          }
        }
      }
      for (; i < D; i += kLanes) {
        pf.Issue();
        V x[KU];
        for (int u = 0; u < KU; ++u) x[u] = LoadCache<kD, kNaN>(k + (j + u) * stride_bytes, i);
        for (int t = 0; t < NH; ++t) {
          const V qv = LoadF32(q + t * D + i);
          for (int u = 0; u < KU; ++u) a[t][u] = Fma(qv, x[u], a[t][u]);
        }
      }
      for (int t = 0; t < NH; ++t) {
        SumLanesN<KU>(a[t], &s[t][j]);
        for (int u = 0; u < KU; ++u) bm[t] = s[t][j + u] > bm[t] ? s[t][j + u] : bm[t];
      }
    }
  }
  for (; j < n; ++j) {
    pf.Issue();
    const char* kj = k + j * stride_bytes;
    // Two sums per head, over the even and the odd vectors of the row, as one head alone
    // needs to keep its multiply-adds from waiting on each other.
    V a0[NH], a1[NH];
    for (int t = 0; t < NH; ++t) a0[t] = a1[t] = Zero();
    int64_t i = 0;
    for (; i + 2 * kLanes <= D; i += 2 * kLanes) {
      V x0, x1;
      LoadCachePair<kD, kNaN>(kj, i, x0, x1);
      for (int t = 0; t < NH; ++t) {
        a0[t] = Fma(LoadF32(q + t * D + i), x0, a0[t]);
        a1[t] = Fma(LoadF32(q + t * D + i + kLanes), x1, a1[t]);
      }
    }
    if (i < D) {
      const V x0 = LoadCache<kD, kNaN>(kj, i);
      for (int t = 0; t < NH; ++t) a0[t] = Fma(LoadF32(q + t * D + i), x0, a0[t]);
    }
    for (int t = 0; t < NH; ++t) {
      s[t][j] = SumLanes(Add(a0[t], a1[t]));
      bm[t] = s[t][j] > bm[t] ? s[t][j] : bm[t];
    }
  }
  FinishPass<kD, kNaN, NH>(s, bm, v, stride_bytes, v_mul, n, D, acc, m, l, pf);
}

// The online-softmax update of a pass once its scores s[t][j < n] and their maxima bm[t] are
// known: m, l and acc (any order of its D floats) rescaled, s turned into the weights (times
// v_mul for an F8E4M3 cache).
template <DType kD, int NH>
VT_INLINE void SoftmaxWeights(float (*s)[kKeysPerPass], const float* bm, float v_mul, int64_t n, int64_t D, float* acc,
                              float* m, float* l) {
  for (int t = 0; t < NH; ++t) {
    float* at = acc + t * D;
    if (bm[t] > m[t]) {
      // e^-inf = 0 on a row's first keys. (The vector Exp, not the scalar numerics::Exp: an
      // inline function with external linkage compiled here could be the copy the linker
      // keeps for code meant to run on any processor.)
      const V r = Exp(Set1(m[t] - bm[t]));
      for (int64_t i = 0; i < D; i += kLanes) StoreF32(at + i, Mul(LoadF32(at + i), r));
      l[t] *= FirstLane(r);
      m[t] = bm[t];
    }
    const V mv = Set1(m[t]);
    for (int64_t j = 0; j < n; j += kLanes) {
      const int c = n - j < kLanes ? static_cast<int>(n - j) : kLanes;
      StoreN(s[t], DType::kF32, j, Exp(Sub(LoadN(s[t], DType::kF32, j, c), mv)), c);
    }
    for (int64_t j = 0; j < n; ++j) l[t] += s[t][j];
    if constexpr (kD == DType::kF8E4M3) {
      const V vm = Set1(v_mul);
      for (int64_t j = 0; j < n; j += kLanes) {
        const int c = n - j < kLanes ? static_cast<int>(n - j) : kLanes;
        StoreN(s[t], DType::kF32, j, Mul(LoadN(s[t], DType::kF32, j, c), vm), c);
      }
    }
  }
}

// The rest of a pass once its scores and their maxima are known: SoftmaxWeights, then the
// value rows weighted into acc.
template <DType kD, bool kNaN, int NH>
VT_INLINE void FinishPass(float (*s)[kKeysPerPass], const float* bm, const char* v, int64_t stride_bytes, float v_mul,
                          int64_t n, int64_t D, float* acc, float* m, float* l, SpreadPrefetch& pf) {
  SoftmaxWeights<kD, NH>(s, bm, v_mul, n, D, acc, m, l);
  // acc stays in registers across the keys, a few vectors of each head at a time
  // (AccVectors): whole groups of them, then single vectors, each with its vector count
  // known at compile time (a count known only at run time kept the accumulators on the
  // stack).
  constexpr int kAccVectors = AccVectors<NH>();
  int64_t i0 = 0;
  for (; i0 + kAccVectors * kLanes <= D; i0 += kAccVectors * kLanes)
    AccumulateValues<kD, kNaN, NH, kAccVectors>(v, stride_bytes, s, n, D, acc, i0, pf);
  for (; i0 + kLanes <= D; i0 += kLanes) AccumulateValues<kD, kNaN, NH, 1>(v, stride_bytes, s, n, D, acc, i0, pf);
}

void CacheToF32(float* dst, const void* src, DType dtype, int64_t n, float scale);

// The Issue steps of AttendRowsAs's passes (heads in tiles of kHeadTile, keys in passes of
// kKeysPerPass).
inline int64_t RowsSteps(int64_t heads, int64_t valid, int64_t D) {
  int64_t steps = 0;
  for (int64_t j = 0; j < valid; j += kKeysPerPass) {
    const int64_t n = valid - j < kKeysPerPass ? valid - j : kKeysPerPass;
    for (int64_t h = 0; h < heads; h += kHeadTile) {
      switch (heads - h < kHeadTile ? heads - h : kHeadTile) {
        case 1: steps += PassSteps<1>(n, D); break;
        case 2: steps += PassSteps<2>(n, D); break;
        case 3: steps += PassSteps<3>(n, D); break;
        default: steps += PassSteps<4>(n, D); break;
      }
    }
  }
  return steps;
}

template <DType kD, bool kNaN = false>
void AttendRowsAs(const float* q, int64_t heads, const void* k, const void* v, int64_t stride, float k_scale,
                  float v_scale, int64_t valid, int64_t D, float* acc, float* m, float* l,
                  const attention::PrefetchSpan* ahead) {
  const int64_t stride_bytes = stride * static_cast<int64_t>(DTypeSize(kD));
  // An F8E4M3 cache's rows come as value·2^-8 (LoadCache): the queries are multiplied by
  // 2^8·k_scale here and the softmax weights by 2^8·v_scale (AttendPass), in place of one
  // multiply per cache element. (The products then round in another order than the
  // definition's, within the op's accuracy bound.)
  float v_mul = 1.0f;
  if constexpr (kD == DType::kF8E4M3) {
    thread_local std::vector<float> qs;
    qs.resize(static_cast<size_t>(heads * D));
    const V ks = Set1(k_scale * 256.0f);
    for (int64_t i = 0; i < heads * D; i += kLanes) StoreF32(&qs[i], Mul(LoadF32(q + i), ks));
    q = qs.data();
    v_mul = v_scale * 256.0f;
  }
  SpreadPrefetch pf(ahead, RowsSteps(heads, valid, D));
  for (int64_t j = 0; j < valid; j += kKeysPerPass) {
    const int64_t n = valid - j < kKeysPerPass ? valid - j : kKeysPerPass;
    const char* kp = static_cast<const char*>(k) + j * stride_bytes;
    const char* vp = static_cast<const char*>(v) + j * stride_bytes;
    for (int64_t h = 0; h < heads; h += kHeadTile) {
      const float* qh = q + h * D;
      float* ah = acc + h * D;
      switch (heads - h < kHeadTile ? heads - h : kHeadTile) {
        case 1: AttendPass<kD, kNaN, 1>(qh, kp, vp, stride_bytes, v_mul, n, D, ah, m + h, l + h, pf); break;
        case 2: AttendPass<kD, kNaN, 2>(qh, kp, vp, stride_bytes, v_mul, n, D, ah, m + h, l + h, pf); break;
        case 3: AttendPass<kD, kNaN, 3>(qh, kp, vp, stride_bytes, v_mul, n, D, ah, m + h, l + h, pf); break;
        default: AttendPass<kD, kNaN, 4>(qh, kp, vp, stride_bytes, v_mul, n, D, ah, m + h, l + h, pf); break;
      }
    }
  }
  pf.Flush();
}

void AttendRows(const float* q, int64_t heads, const void* k, const void* v, int64_t stride, DType dtype,
                float k_scale, float v_scale, int64_t valid, int64_t D, float* acc, float* m, float* l,
                const attention::PrefetchSpan* ahead) {
  switch (dtype) {
    case DType::kF32:
      return AttendRowsAs<DType::kF32>(q, heads, k, v, stride, 1.0f, 1.0f, valid, D, acc, m, l, ahead);
    case DType::kBF16:
      return AttendRowsAs<DType::kBF16>(q, heads, k, v, stride, 1.0f, 1.0f, valid, D, acc, m, l, ahead);
    case DType::kF16:
      return AttendRowsAs<DType::kF16>(q, heads, k, v, stride, 1.0f, 1.0f, valid, D, acc, m, l, ahead);
    default: break;
  }
  if (k_scale < 0x1p120f && v_scale < 0x1p120f) {  // 2^8·scale finite (any real model's scales)
    // Rows with a NaN code (a NaN written to the cache) through the decode that keeps it;
    // the scan is three integer operations per 8 codes, the decode's test four vector
    // operations per 8 codes of each pass over them.
    const auto* kb = static_cast<const char*>(k);
    const auto* vb = static_cast<const char*>(v);
    if (AnyFp8NaN(kb, stride, valid, D) || AnyFp8NaN(vb, stride, valid, D))
      return AttendRowsAs<DType::kF8E4M3, true>(q, heads, k, v, stride, k_scale, v_scale, valid, D, acc, m, l,
                                                ahead);
    return AttendRowsAs<DType::kF8E4M3, false>(q, heads, k, v, stride, k_scale, v_scale, valid, D, acc, m, l,
                                               ahead);
  }
  // Else the rows widened to f32 first by CacheToF32's exact decode.
  thread_local std::vector<float> kf, vf;
  kf.resize(static_cast<size_t>(valid * D));
  vf.resize(static_cast<size_t>(valid * D));
  for (int64_t j = 0; j < valid; ++j) {
    CacheToF32(&kf[j * D], static_cast<const uint8_t*>(k) + j * stride, dtype, D, k_scale);
    CacheToF32(&vf[j * D], static_cast<const uint8_t*>(v) + j * stride, dtype, D, v_scale);
  }
  AttendRowsAs<DType::kF32>(q, heads, kf.data(), vf.data(), D, 1.0f, 1.0f, valid, D, acc, m, l, ahead);
}

void CacheToF32(float* dst, const void* src, DType dtype, int64_t n, float scale) {
  if (dtype == DType::kF8E4M3) {
    const auto* p = static_cast<const uint8_t*>(src);
    const V s = Set1(scale);
    int64_t i = 0;
    if (scale < 0x1p120f) {  // 2^8·scale finite: the faster decode, the same floats
      const V s256 = Set1(scale * 256.0f);
      for (; i + kLanes <= n; i += kLanes) StoreF32(dst + i, Mul(DecodeFp8Over256(p + i), s256));
    }
    for (; i + kLanes <= n; i += kLanes) StoreF32(dst + i, Mul(DecodeFp8(LoadU8(p + i)), s));
    if (i < n) {
      const int c = static_cast<int>(n - i);
      StoreN(dst, DType::kF32, i, Mul(LoadFp8N(p, i, c), s), c);
    }
    return;
  }
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) StoreF32(dst + i, Load(src, dtype, i));
  if (i < n) {
    const int c = static_cast<int>(n - i);
    StoreN(dst, DType::kF32, i, LoadN(src, dtype, i, c), c);
  }
}

// n elements of `dtype` (F32, BF16, F16) at src -> KvCacheQuantizeFp8(x, scale) at dst:
// x / scale (an IEEE division, as the definition), clamped to [-448, 448] with NaN kept
// (the operand order of Min and Max), rounded to e4m3fn: the definition's bytes.
void QuantizeToCache(uint8_t* dst, const void* src, DType dtype, int64_t n, float scale) {
  const V s = Set1(scale), hi = Set1(448.0f), lo = Set1(-448.0f);
  auto quantize = [&](V x) VT_ALWAYS_INLINE { return FloatToFp8Bits(Max(lo, Min(hi, Div(x, s)))); };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) StoreFp8N(dst, i, quantize(Load(src, dtype, i)), kLanes);
  if (i < n) {
    const int c = static_cast<int>(n - i);
    StoreFp8N(dst, i, quantize(LoadN(src, dtype, i, c)), c);
  }
}

}  // namespace
}  // namespace vt::cpu::VT_SIMD_NS
