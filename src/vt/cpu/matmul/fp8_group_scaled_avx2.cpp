// AVX2 rows of MatmulFp8GroupScaled (block-wise and per-channel scaled fp8; the definition
// is in vt/ops/matmul.h, the driver in matmul/fp8_group_scaled.cpp). fp8 codes are decoded
// 16 at a time in registers (matmul/fp8_decode_avx2.h, either Fp8StreamDecode) and
// multiplied into 8-lane f32 sums.
//
// Every (row of a, weight row) pair gets the same operations in the same order, whatever
// M is and whichever path below runs it, so a row's sums are those it gets alone:
//   for each group g of K: acc = 0; for each 16-value step of the group (codes past the
//   group's end are zero, as are a's values: a's rows are laid out per group, padded to
//   whole steps, in the decode's order): acc = fma(a[0..7], w0, acc), then
//   acc = fma(a[8..15], w1, acc); then row = fma(acc, s_a·s_b·2^8, row) (the 2^8 undoes the
//   decode's scaling); at the end the row's 8 lanes are summed.
// The paths differ only in where the decoded weights come from:
//  - one row of a (a decode step): four weight rows decoded in registers, sharing each
//    load of a, each continuing one of four sequential streams (matmul/local.h's quarters);
//  - 2 to 8 rows of a (a small decode batch): two adjacent weight rows decoded in registers,
//    each step's codes multiplied into up to 4 rows of a (a second pass for rows 5-8), the
//    rows' sums kept in memory between groups;
//  - more rows of a (and the rows of a four or a pair whose codes hold a NaN): weight rows
//    decoded once into a buffer (the same f32 values), two at a time, then every row of a
//    against both in tiles of 4 rows of a x 2 weight rows (one alone when a row holds a NaN
//    code).
// The decodes make NaN codes finite, so a row holding one is reported and the driver
// computes it the portable way. (A weight prepared for the op does not come here: it is laid
// out for the outer-product tiles of matmul/packed_avx2.cpp.)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "vt/cpu/matmul/fp8_decode_avx2.h"
#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/local.h"

namespace vt::cpu::matmul {

namespace {

constexpr int64_t kStep = 16;
// Rows of a up to which weight rows are decoded in registers in pairs (PairInRegisters, in
// passes of up to 4 rows of a).
constexpr int64_t kPairRowsMax = 8;
// Rows of a per tile of the many-rows path (with two weight rows: 2 x 4 products a step).
constexpr int kTileRows = 4;

inline float Hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

template <bool kBits>
__attribute__((always_inline)) inline void Decode(__m128i x, __m256& w0, __m256& w1) {
  if constexpr (kBits)
    Fp8ToF32BitsX16<false>(x, w0, w1);
  else
    Fp8ToF32x16<false>(x, w0, w1);
}

// 16 codes of a row at k, zero past `left` (< 16) of them: a group's partial last step
// (ForEachStep).
__attribute__((always_inline)) inline __m128i LoadPartialCodes(const uint8_t* p, int64_t left) {
  alignas(16) uint8_t t[16] = {};
  std::memcpy(t, p, static_cast<size_t>(left));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(t));
}

// step(s, whole) for the 16-value steps of a group of len values: the whole steps, then the
// partial last one. The partial load's copy is a library call; inside the loop of whole
// steps, the compiler saved the live vector registers around it on every step.
template <typename Step>
__attribute__((always_inline)) inline void ForEachStep(int64_t len, Step&& step) {
  int64_t s = 0;
  for (; s + kStep <= len; s += kStep) step(s, true);
  if (s < len) step(s, false);
}

// Accumulates the NaN codes' magnitude pattern (0x7F) seen in x.
__attribute__((always_inline)) inline __m128i Seen(__m128i seen, __m128i x) {
  return _mm_max_epu8(seen, _mm_and_si128(x, _mm_set1_epi8(0x7F)));
}
__attribute__((always_inline)) inline bool SawNan(__m128i seen) {
  return _mm_movemask_epi8(_mm_cmpeq_epi8(seen, _mm_set1_epi8(0x7F))) != 0;
}

// Four weight rows b[j] against the one row of a, decoded in registers. false (out unset)
// when a row holds a NaN code.
template <bool kBits>
bool Rows4(const GroupScaledRows& p, const uint8_t* const* b, const float* const* sc, float* out) {
  const auto* a = static_cast<const float*>(p.a);
  __m256 row[4], acc[4];
  for (int j = 0; j < 4; ++j) row[j] = _mm256_setzero_ps();
  __m128i seen = _mm_setzero_si128();
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t k0 = g * p.block_k, len = std::min(p.K, k0 + p.block_k) - k0;
    const float* ag = a + g * p.gstride;
    for (int j = 0; j < 4; ++j) acc[j] = _mm256_setzero_ps();
    ForEachStep(len, [&](int64_t s, bool whole) __attribute__((always_inline)) {
      const __m256 a0 = _mm256_loadu_ps(ag + s), a1 = _mm256_loadu_ps(ag + s + 8);
      for (int j = 0; j < 4; ++j) {
        const uint8_t* bp = b[j] + k0 + s;
        // Each row continues a sequential stream (its quarter of the driver's rows).
        if (((k0 + s) & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(bp) + kStreamPrefetch, _MM_HINT_T0);
        const __m128i x = whole ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(bp)) : LoadPartialCodes(bp, len - s);
        seen = Seen(seen, x);
        __m256 w0, w1;
        Decode<kBits>(x, w0, w1);
        acc[j] = _mm256_fmadd_ps(a0, w0, acc[j]);
        acc[j] = _mm256_fmadd_ps(a1, w1, acc[j]);
      }
    });
    for (int j = 0; j < 4; ++j) row[j] = _mm256_fmadd_ps(acc[j], _mm256_set1_ps(sc[j][g]), row[j]);
  }
  if (SawNan(seen)) return false;
  for (int j = 0; j < 4; ++j) out[j] = Hsum(row[j]);
  return true;
}

// Weight rows n and n + 1 against rows m0 .. m0 + MR - 1 of a, decoded in registers and each step's
// codes used by every row of a: each (row of a, weight row) pair gets Rows4's operations in
// Rows4's order (per group: the two fmas of each step, then the group's scale; the last
// group's zero codes and a's zero padding as the buffer path has them). The 2·MR rows' sums
// stay in memory between groups (with the group sums, decodes and a vector of a they would
// not fit the registers). false (c unset) when either weight row holds a NaN code.
template <bool kBits, int MR>
bool PairInRegisters(const GroupScaledRows& p, int64_t m0, int64_t n, float* c0, float* c1, int64_t ldc) {
  const auto* a = static_cast<const float*>(p.a);
  const uint8_t* b[2] = {p.b + n * p.K, p.b + (n + 1) * p.K};
  const float* sc[MR][2];
  alignas(32) float row[MR][2][8];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < 2; ++j) {
      sc[i][j] = p.scales + ((m0 + i) * p.NB + (n + j) / p.block_n) * p.G;
      _mm256_store_ps(row[i][j], _mm256_setzero_ps());
    }
  __m128i seen = _mm_setzero_si128();
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t k0 = g * p.block_k, len = std::min(p.K, k0 + p.block_k) - k0;
    __m256 acc[MR][2];
    const float* ag[MR];
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = acc[i][1] = _mm256_setzero_ps();
      ag[i] = a + (m0 + i) * p.lda + g * p.gstride;
    }
    ForEachStep(len, [&](int64_t s, bool whole) __attribute__((always_inline)) {
      __m256 w0[2], w1[2];
      for (int j = 0; j < 2; ++j) {
        const uint8_t* bp = b[j] + k0 + s;
        // The pairs of a thread's rows follow each other: one sequential stream.
        if (((k0 + s) & 63) == 0)
          _mm_prefetch(reinterpret_cast<const char*>(bp) + AdjacentAhead(k0 + s, p.K, 2, 1), _MM_HINT_T0);
        const __m128i x = whole ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(bp)) : LoadPartialCodes(bp, len - s);
        seen = Seen(seen, x);
        Decode<kBits>(x, w0[j], w1[j]);
      }
      for (int i = 0; i < MR; ++i) {
        const __m256 a0 = _mm256_loadu_ps(ag[i] + s), a1 = _mm256_loadu_ps(ag[i] + s + 8);
        for (int j = 0; j < 2; ++j) {
          acc[i][j] = _mm256_fmadd_ps(a0, w0[j], acc[i][j]);
          acc[i][j] = _mm256_fmadd_ps(a1, w1[j], acc[i][j]);
        }
      }
    });
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < 2; ++j)
        _mm256_store_ps(row[i][j], _mm256_fmadd_ps(acc[i][j], _mm256_set1_ps(sc[i][j][g]), _mm256_load_ps(row[i][j])));
  }
  if (SawNan(seen)) return false;
  for (int i = 0; i < MR; ++i) {
    c0[(m0 + i) * ldc] = Hsum(_mm256_load_ps(row[i][0]));
    c1[(m0 + i) * ldc] = Hsum(_mm256_load_ps(row[i][1]));
  }
  return true;
}

// PairInRegisters over every row of a (M <= kPairRowsMax), in passes of up to 4 rows (each
// pass decodes the pair again, from L1). false when the pair holds a NaN code (the first
// pass finds it; nothing is written).
template <bool kBits>
bool PairPasses(const GroupScaledRows& p, int64_t n, float* c0, float* c1, int64_t ldc) {
  for (int64_t m0 = 0; m0 < p.M; m0 += 4) {
    bool ok;
    switch (std::min<int64_t>(4, p.M - m0)) {
      case 1: ok = PairInRegisters<kBits, 1>(p, m0, n, c0, c1, ldc); break;
      case 2: ok = PairInRegisters<kBits, 2>(p, m0, n, c0, c1, ldc); break;
      case 3: ok = PairInRegisters<kBits, 3>(p, m0, n, c0, c1, ldc); break;
      default: ok = PairInRegisters<kBits, 4>(p, m0, n, c0, c1, ldc); break;
    }
    if (!ok) return false;
  }
  return true;
}

// One weight row decoded into w (G * gstride floats, the steps as Rows4 decodes them); false
// when it holds a NaN code.
template <bool kBits>
bool DecodeRow(const GroupScaledRows& p, const uint8_t* b, float* w) {
  __m128i seen = _mm_setzero_si128();
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t k0 = g * p.block_k, len = std::min(p.K, k0 + p.block_k) - k0;
    ForEachStep(len, [&](int64_t s, bool whole) __attribute__((always_inline)) {
      if (((k0 + s) & 63) == 0) _mm_prefetch(reinterpret_cast<const char*>(b + k0 + s) + 1024, _MM_HINT_T0);
      const __m128i x = whole ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + k0 + s))
                              : LoadPartialCodes(b + k0 + s, len - s);
      seen = Seen(seen, x);
      __m256 w0, w1;
      Decode<kBits>(x, w0, w1);
      _mm256_storeu_ps(w + g * p.gstride + s, w0);
      _mm256_storeu_ps(w + g * p.gstride + s + 8, w1);
    });
  }
  return !SawNan(seen);
}

// NR decoded weight rows (w[j]: weight row n[j], its sums into column c[j]) against every row
// of a, in tiles of MR rows of a x NR weight rows: each (row of a, weight row) pair gets
// Rows4's operations in Rows4's order (per group: the two fmas of each step, then the group's
// scale), so its sums are those it gets alone; a tile shares each load of a among NR weight
// rows and each load of w among MR rows of a.
template <int MR, int NR>
__attribute__((always_inline)) inline void Tile(const GroupScaledRows& p, const float* const* w, const int64_t* n,
                                                float* const* c, int64_t ldc, int64_t m) {
  const auto* a = static_cast<const float*>(p.a);
  __m256 row[MR][NR], acc[MR][NR];
  const float* sc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      row[i][j] = _mm256_setzero_ps();
      sc[i][j] = p.scales + ((m + i) * p.NB + n[j] / p.block_n) * p.G;
    }
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t len = std::min(p.K, (g + 1) * p.block_k) - g * p.block_k;
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
    for (int64_t s = 0; s < len; s += kStep) {
      __m256 w0[NR], w1[NR];
      for (int j = 0; j < NR; ++j) {
        w0[j] = _mm256_loadu_ps(w[j] + g * p.gstride + s);
        w1[j] = _mm256_loadu_ps(w[j] + g * p.gstride + s + 8);
      }
      for (int i = 0; i < MR; ++i) {
        const float* ag = a + (m + i) * p.lda + g * p.gstride + s;
        const __m256 a0 = _mm256_loadu_ps(ag), a1 = _mm256_loadu_ps(ag + 8);
        for (int j = 0; j < NR; ++j) {
          acc[i][j] = _mm256_fmadd_ps(a0, w0[j], acc[i][j]);
          acc[i][j] = _mm256_fmadd_ps(a1, w1[j], acc[i][j]);
        }
      }
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) row[i][j] = _mm256_fmadd_ps(acc[i][j], _mm256_set1_ps(sc[i][j][g]), row[i][j]);
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) c[j][(m + i) * ldc] = Hsum(row[i][j]);
}

template <int NR>
void AllRowsOfA(const GroupScaledRows& p, const float* const* w, const int64_t* n, float* const* c, int64_t ldc) {
  int64_t m = 0;
  for (; m + kTileRows <= p.M; m += kTileRows) Tile<kTileRows, NR>(p, w, n, c, ldc, m);
  for (; m < p.M; ++m) Tile<1, NR>(p, w, n, c, ldc, m);
}

template <bool kBits>
int64_t Sums(const GroupScaledRows& p, int64_t n0, int64_t n1, float* wbuf, float* c, int64_t ldc, uint8_t* nan) {
  int64_t in_registers = 0;
  std::fill(nan, nan + (n1 - n0), uint8_t{0});
  // Weight row n decoded into w, then against every row of a; false when it holds a NaN code.
  auto decode = [&](int64_t n, float* w) {
    const bool ok = DecodeRow<kBits>(p, p.b + n * p.K, w);
    if (!ok) nan[n - n0] = 1;
    return ok;
  };
  auto alone = [&](int64_t n, const float* w) {
    float* cn[1] = {c + (n - n0)};
    AllRowsOfA<1>(p, &w, &n, cn, ldc);
  };
  auto one = [&](int64_t n) {
    if (decode(n, wbuf)) alone(n, wbuf);
  };
  // Weight rows n and n + 1 through the buffer (wbuf holds both); of a pair with a NaN code,
  // the other alone.
  auto pair = [&](int64_t n) {
    float* w2 = wbuf + p.lda;
    const bool ok0 = decode(n, wbuf), ok1 = decode(n + 1, w2);
    if (ok0 && ok1) {
      const float* w[2] = {wbuf, w2};
      const int64_t ns[2] = {n, n + 1};
      float* cn[2] = {c + (n - n0), c + (n + 1 - n0)};
      AllRowsOfA<2>(p, w, ns, cn, ldc);
    } else if (ok0) {
      alone(n, wbuf);
    } else if (ok1) {
      alone(n + 1, w2);
    }
  };
  if (p.M != 1) {
    int64_t n = n0;
    for (; n + 2 <= n1; n += 2) {
      if (p.M <= kPairRowsMax && PairPasses<kBits>(p, n, c + (n - n0), c + (n + 1 - n0), ldc)) {
        in_registers += 2;
        continue;
      }
      pair(n);
    }
    if (n < n1) one(n);
    return in_registers;
  }
  // A decode step: four rows at a time, one from each quarter of [n0, n1); the rest, and a
  // four with a NaN code, one by one.
  const int64_t quarter = (n1 - n0) / 4;
  for (int64_t i = 0; i < quarter; ++i) {
    const uint8_t* bp[4];
    const float* sc[4];
    int64_t n[4];
    for (int j = 0; j < 4; ++j) {
      n[j] = n0 + j * quarter + i;
      bp[j] = p.b + n[j] * p.K;
      sc[j] = p.scales + (n[j] / p.block_n) * p.G;
    }
    float out[4];
    if (Rows4<kBits>(p, bp, sc, out)) {
      for (int j = 0; j < 4; ++j) c[n[j] - n0] = out[j];
      in_registers += 4;
    } else {
      for (int j = 0; j < 4; ++j) one(n[j]);
    }
  }
  for (int64_t n = n0 + 4 * quarter; n < n1; ++n) one(n);
  return in_registers;
}

}  // namespace

int64_t GroupScaledSumsAvx2(const GroupScaledRows& p, bool bits, int64_t n0, int64_t n1, float* wbuf, float* c,
                            int64_t ldc, uint8_t* nan_rows) {
  return bits ? Sums<true>(p, n0, n1, wbuf, c, ldc, nan_rows) : Sums<false>(p, n0, n1, wbuf, c, ldc, nan_rows);
}

}  // namespace vt::cpu::matmul
