// The prefill tile kernel of attention::KernelSet (attend_tile), written once against
// simd_vec.h; attention_avx512.cpp, attention_avx2.cpp and attention_neon.cpp compile it at
// their width.
//
// A prefill work item holds many query vectors (rows × query heads of one KV head). Each
// vector lane is one query: the item's queries are stored transposed (element d of every
// query side by side), so a key's scores against a vector of queries are lane-wise
// multiply-adds with the key's element d broadcast, and the online softmax (running max,
// sum, rescale) is lane-wise too: no horizontal sums per key. The value product then adds
// p_j · v_j to each query's row of acc, a few queries and a few vectors of the row in
// registers at a time. Products accumulate with fma (as attention_simd.h); e^x is the
// vector form of numerics::Exp; each query's sum runs over the keys in order, as the
// definition's.
#pragma once

#include <cmath>

#include "vt/cpu/attention_kernels.h"
#include "vt/cpu/simd_vec.h"

namespace vt::cpu::VT_SIMD_NS {
namespace {

// Keys per pass of the tile kernel: their probabilities wait in a stack array.
constexpr int64_t kTilePassKeys = 32;
// The score product runs over kScoreRun elements at a time: that run of the queries'
// vectors waits in registers while groups of kScoreGroup keys take it (each key's element
// broadcast), so the queries are loaded once per run for all the pass's keys. AVX2 has 16
// vector registers, AVX-512 and NEON 32. A score thus sums its products in runs, then the
// runs' sums in order: chains of kScoreRun + D / kScoreRun additions rather than D (the f32
// tests' bound is a few ulp).
constexpr int kScoreRun = kLanes == 8 ? 8 : 16;
constexpr int kScoreGroup = kLanes == 8 ? 4 : 8;
static_assert(kTilePassKeys % kScoreGroup == 0, "a pass is whole groups of keys");
// Queries × row vectors of the value product.
constexpr int kValueQueries = 4;
constexpr int kValueVectors = kLanes == 8 ? 2 : 4;

// s[g] += Σ_{d < R} k[g·D + d] · x[d] for kScoreGroup keys (rows D apart).
template <int R>
VT_INLINE void ScoreGroup(const V* x, const float* k, int64_t D, V* s) {
  V a[kScoreGroup];
  for (int g = 0; g < kScoreGroup; ++g) a[g] = Zero();
  for (int d = 0; d < R; ++d)
    for (int g = 0; g < kScoreGroup; ++g) a[g] = Fma(Set1(k[g * D + d]), x[d], a[g]);
  for (int g = 0; g < kScoreGroup; ++g) s[g] = Add(s[g], a[g]);
}

// s[j] = Σ_d k_j[d] · qt[d·ldq ..] for keys j < nk (a multiple of kScoreGroup; rows k + j·D)
// and one vector of queries.
VT_INLINE void TileScores(const float* qt, int64_t ldq, const float* k, int64_t nk, int64_t D, V* s) {
  for (int64_t j = 0; j < nk; ++j) s[j] = Zero();
  int64_t d0 = 0;
  for (; d0 + kScoreRun <= D; d0 += kScoreRun) {
    V x[kScoreRun];
    for (int d = 0; d < kScoreRun; ++d) x[d] = LoadF32(qt + (d0 + d) * ldq);
    for (int64_t j = 0; j < nk; j += kScoreGroup) ScoreGroup<kScoreRun>(x, k + j * D + d0, D, s + j);
  }
  if (d0 < D)  // a last, shorter run
    for (int64_t j = 0; j < nk; ++j) {
      V a = Zero();
      for (int64_t d = d0; d < D; ++d) a = Fma(Set1(k[j * D + d]), LoadF32(qt + d * ldq), a);
      s[j] = Add(s[j], a);
    }
}

// acc[t·D + i0 ..] = acc[..]·r[t] + Σ_j p[j·kLanes + t] · v_j[i0 ..] for NQ queries and DV
// vectors of their rows, keys in order.
template <int NQ, int DV>
VT_INLINE void TileValues(const float* p, const float* r, const float* v, int64_t n, int64_t D, float* acc,
                          int64_t i0) {
  V a[NQ][DV];
  for (int t = 0; t < NQ; ++t) {
    const V rt = Set1(r[t]);
    for (int u = 0; u < DV; ++u) a[t][u] = Mul(LoadF32(acc + t * D + i0 + u * kLanes), rt);
  }
  for (int64_t j = 0; j < n; ++j) {
    V x[DV];
    for (int u = 0; u < DV; ++u) x[u] = LoadF32(v + j * D + i0 + u * kLanes);
    for (int t = 0; t < NQ; ++t) {
      const V pt = Set1(p[j * kLanes + t]);
      for (int u = 0; u < DV; ++u) a[t][u] = Fma(pt, x[u], a[t][u]);
    }
  }
  for (int t = 0; t < NQ; ++t)
    for (int u = 0; u < DV; ++u) StoreF32(acc + t * D + i0 + u * kLanes, a[t][u]);
}

// One pass of n <= kTilePassKeys keys (positions tok0 + j) for the vector of queries from q.
VT_INLINE void TilePass(const float* qt, int64_t ldq, const float* pos, int64_t q, const float* k, const float* v,
                        int64_t n, int64_t tok0, int64_t D, float* acc, float* m, float* l) {
  alignas(64) V s[kTilePassKeys];
  alignas(64) float p[kTilePassKeys * kLanes];
  alignas(64) float r[kLanes];
  // Keys past n (up to the group) are read too; their scores are never used.
  TileScores(qt + q, ldq, k, (n + kScoreGroup - 1) / kScoreGroup * kScoreGroup, D, s);
  // Queries ascend in position: only a vector whose first query precedes the pass's last
  // key has keys to mask (scores of keys after a query's position become -inf, so
  // e^(s - m) = 0; every query has seen key 0 by then, so its max is finite).
  const V mo = LoadF32(m + q), pv = LoadF32(pos + q);
  if (pos[q] < static_cast<float>(tok0 + n - 1))
    for (int64_t j = 0; j < n; ++j) s[j] = Select(LtF(pv, Set1(static_cast<float>(tok0 + j))), Set1(-INFINITY), s[j]);
  V mn = mo;
  for (int64_t j = 0; j < n; ++j) mn = Max(mn, s[j]);
  const V rv = Exp(Sub(mo, mn));  // e^-inf = 0 on a query's first keys
  V lv = Mul(LoadF32(l + q), rv);
  for (int64_t j = 0; j < n; ++j) {
    const V pj = Exp(Sub(s[j], mn));
    StoreF32(p + j * kLanes, pj);
    lv = Add(lv, pj);
  }
  StoreF32(m + q, mn);
  StoreF32(l + q, lv);
  StoreF32(r, rv);
  for (int t = 0; t < kLanes; t += kValueQueries) {
    float* at = acc + (q + t) * D;
    int64_t i0 = 0;
    for (; i0 + kValueVectors * kLanes <= D; i0 += kValueVectors * kLanes)
      TileValues<kValueQueries, kValueVectors>(p + t, r + t, v, n, D, at, i0);
    for (; i0 < D; i0 += kLanes) TileValues<kValueQueries, 1>(p + t, r + t, v, n, D, at, i0);
  }
}

void AttendTile(const float* qt, int64_t ldq, const float* pos, int64_t q0, int64_t q1, const float* k,
                const float* v, int64_t n, int64_t tok0, int64_t D, float* acc, float* m, float* l) {
  for (int64_t j = 0; j < n; j += kTilePassKeys) {
    const int64_t c = n - j < kTilePassKeys ? n - j : kTilePassKeys;
    for (int64_t q = q0; q < q1; q += kLanes) TilePass(qt, ldq, pos, q, k + j * D, v + j * D, c, tok0 + j, D, acc, m, l);
  }
}

}  // namespace
}  // namespace vt::cpu::VT_SIMD_NS
