// AVX-512 BF16 rows of MatmulFp8GroupScaled (block-wise and per-channel scaled fp8; the
// definition is in vt/ops/matmul.h, the driver in matmul/fp8_group_scaled.cpp). fp8 codes
// are exact in BF16, so weight and activation codes go through the fp8 table
// (Fp8ToBf16Lut: 64 codes, five instructions) into vdpbf16ps, whose products are exact in
// f32 (as in the static path's BF16 set, matmul/gemm_avx512.cpp).
//
// Every (row of a, weight row) pair gets the same operations in the same order, whatever
// M is and whichever path below runs it, so a row's sums are those it gets alone:
//   for each group g of K: acc = 0; for each 64-value step of the group (the last one
//   masked to the group's end; a's rows are laid out per group, padded to whole steps):
//   acc = vdpbf16ps(acc, w[0..31], a[0..31]), then the same for values 32..63 (the table's
//   order of K within the step, which a shares); then row = fma(acc, s_a·s_b, row);
//   at the end the row's 16 lanes are summed (Hsum4, the same tree for each of its slots).
// The paths differ only in where the decoded weights come from:
//  - up to 4 rows of a (decode steps): weight rows decoded in registers, each continuing
//    one of four sequential streams (the quarters of matmul/local.h), sharing each load of a;
//  - more rows: four weight rows decoded once into a buffer (the same BF16 values, L1),
//    then tiles of 4 rows of a by 2 weight rows read it, so the weights come from memory
//    once and are decoded once for all rows of a.
// NaN codes decode to NaN (the table keeps them), so no row needs another path.
#include "vt/cpu/avx512_common.h"  // first: intrinsics and their warning settings

#include <algorithm>

#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/local.h"

namespace vt::cpu::matmul {

namespace {

constexpr int64_t kStep = 64;  // K values per step: one 64-byte load of codes, two vdpbf16ps
constexpr int kRowsA = 4;        // rows of a decoded against in registers
constexpr int kBufferRowsA = 2;  // rows of a per tile on the buffered path

// Where a tile's weights come from: NR rows of codes (rows `ldb` bytes apart), decoded in
// registers; or NR decoded rows of the buffer (`lda` BF16 values apart, a's layout).
struct FromCodes {
  const uint8_t* b;
  int64_t ldb, K;
};
struct FromBuffer {
  const uint16_t* w;
  int64_t lda;
};

template <int NR, bool kFull>
__attribute__((target("avx512vbmi"), always_inline)) inline void LoadWeights(const Fp8ToBf16Lut& lut,
                                                                           const FromCodes& src, int64_t k,
                                                                           int64_t, __mmask64 mask,
                                                                           __m512bh (&w)[NR][2]) {
  for (int j = 0; j < NR; ++j) {
    const uint8_t* p = src.b + j * src.ldb + k;
    __m512i x;
    if constexpr (kFull) {
      _mm_prefetch(reinterpret_cast<const char*>(p + PrefetchAhead(k, src.ldb, src.K, NR, 1)), _MM_HINT_T0);
      x = _mm512_loadu_si512(p);
    } else {
      x = _mm512_maskz_loadu_epi8(mask, p);
    }
    __m512i w0, w1;
    lut.Decode(x, w0, w1);
    w[j][0] = reinterpret_cast<__m512bh>(w0);
    w[j][1] = reinterpret_cast<__m512bh>(w1);
  }
}
template <int NR, bool kFull>
__attribute__((target("avx512vbmi"), always_inline)) inline void LoadWeights(const Fp8ToBf16Lut&,
                                                                           const FromBuffer& src, int64_t,
                                                                           int64_t at, __mmask64,
                                                                           __m512bh (&w)[NR][2]) {
  for (int j = 0; j < NR; ++j) {
    w[j][0] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(src.w + j * src.lda + at));
    w[j][1] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(src.w + j * src.lda + at + 32));
    asm("" : "+v"(w[j][0]), "+v"(w[j][1]));  // loaded once for every row of a (see Tile)
  }
}

// A tile's scales s(i, j, g): gathered per tile, s = scl[g * MR * NR + i * NR + j]; or, where
// the tile's weight rows share their row block (kShared), read from the table in place,
// s = scl[i * ldi + g] for every j.
template <bool kShared>
struct TileScales {
  const float* scl;
  int64_t ldi;
};

// c[i * ldc + j * cs] = Σ_g (Σ_{k in g} a[i, k]·w[j, k]) · s(i, j, g) for MR rows of a (p.lda
// apart, from `a`) and NR weight rows from `src`.
template <int MR, int NR, typename Src, bool kShared>
__attribute__((target("avx512vbmi"), always_inline)) inline void Tile(const Fp8ToBf16Lut& lut,
                                                                    const GroupScaledRows& p, const uint16_t* a,
                                                                    const Src& src, TileScales<kShared> sc, float* c,
                                                                    int64_t ldc, int64_t cs) {
  __m512 row[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) row[i][j] = _mm512_setzero_ps();
  // Group g: its steps, then the fold. kSteps > 0: a group of exactly kSteps whole steps
  // (block_k = 64 kSteps), unrolled; 0: the group's length as it comes (the last group,
  // or any block width), whole steps then a masked one.
  auto group = [&]<int kSteps>(int64_t g) __attribute__((target("avx512vbmi"), always_inline)) {
    const int64_t k0 = g * p.block_k, at0 = g * p.gstride;
    __m512 acc[MR][NR];
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
    auto step = [&]<bool kFull>(int64_t s, __mmask64 mask) __attribute__((target("avx512vbmi"), always_inline)) {
      __m512bh w[NR][2];
      LoadWeights<NR, kFull>(lut, src, k0 + s, at0 + s, mask, w);
      for (int i = 0; i < MR; ++i) {
        const uint16_t* ar = a + i * p.lda + at0 + s;
        __m512bh a0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(ar));
        __m512bh a1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(ar + 32));
        // In registers for all NR weight rows: left to itself, GCC loads them again for each.
        asm("" : "+v"(a0), "+v"(a1));
        for (int j = 0; j < NR; ++j) {
          acc[i][j] = _mm512_dpbf16_ps(acc[i][j], w[j][0], a0);
          acc[i][j] = _mm512_dpbf16_ps(acc[i][j], w[j][1], a1);
        }
      }
    };
    if constexpr (kSteps > 0) {
      for (int t = 0; t < kSteps; ++t) step.template operator()<true>(t * kStep, 0);
    } else {
      const int64_t len = std::min(p.K, k0 + p.block_k) - k0;
      int64_t s = 0;
      for (; s + kStep <= len; s += kStep) step.template operator()<true>(s, 0);
      if (s < len) step.template operator()<false>(s, Mask64(len - s));
    }
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) {
        const float s = kShared ? sc.scl[i * sc.ldi + g] : sc.scl[g * MR * NR + i * NR + j];
        row[i][j] = _mm512_fmadd_ps(acc[i][j], _mm512_set1_ps(s), row[i][j]);
      }
  };
  int64_t g = 0;
  if (p.block_k == 2 * kStep)  // block FP8's 128-column groups: all but a partial last one
    for (; g < p.K / p.block_k; ++g) group.template operator()<2>(g);
  for (; g < p.G; ++g) group.template operator()<0>(g);
  StoreSums<MR, NR>(row, c, ldc, cs);
}

// Rows [m, m + mr) of a (mr <= 4) against the NR weight rows n[0..NR) from src: their scales
// read in place where the rows share a row block, else gathered into scl (G · mr · NR floats)
// in the order Tile reads them; then the tile.
template <int NR, typename Src>
__attribute__((target("avx512vbmi"))) void Rows(const Fp8ToBf16Lut& lut, const GroupScaledRows& p, int64_t m,
                                                int64_t mr, const Src& src, const int64_t* n, float* scl, float* c,
                                                int64_t ldc, int64_t cs) {
  const auto* a = static_cast<const uint16_t*>(p.a) + m * p.lda;
  c += m * ldc;
  auto run = [&](auto sc) __attribute__((target("avx512vbmi"), always_inline)) {
    switch (mr) {
      case 1: return Tile<1, NR>(lut, p, a, src, sc, c, ldc, cs);
      case 2: return Tile<2, NR>(lut, p, a, src, sc, c, ldc, cs);
      case 3: return Tile<3, NR>(lut, p, a, src, sc, c, ldc, cs);
      default: return Tile<4, NR>(lut, p, a, src, sc, c, ldc, cs);
    }
  };
  if (n[0] / p.block_n == n[NR - 1] / p.block_n)  // n ascends
    return run(TileScales<true>{p.scales + (m * p.NB + n[0] / p.block_n) * p.G, p.NB * p.G});
  const float* sr[4 * NR];  // the scale rows, [m + i, n[j] / block_n]
  for (int64_t i = 0; i < mr; ++i)
    for (int j = 0; j < NR; ++j) sr[i * NR + j] = p.scales + ((m + i) * p.NB + n[j] / p.block_n) * p.G;
  for (int64_t g = 0; g < p.G; ++g)
    for (int64_t t = 0; t < mr * NR; ++t) scl[g * mr * NR + t] = sr[t][g];
  run(TileScales<false>{scl, 0});
}

// The NR weight rows n[0..NR) (rows `ldb` bytes apart from b_rows) against every row of a.
// Up to 4 rows of a: decoded in registers, four weight rows per tile for one row of a, two
// for more (with the rows' accumulators, the decoded weights and the table, a tile of 4 x 2
// fills the 32 vector registers). More rows of a: the weight rows decoded once into buf,
// then tiles of 4 rows of a by 2 weight rows read it.
template <int NR>
__attribute__((target("avx512vbmi"))) void Group(const Fp8ToBf16Lut& lut, const GroupScaledRows& p,
                                                 const uint8_t* b_rows, int64_t ldb, const int64_t* n,
                                                 float* scl, uint16_t* buf, float* c, int64_t ldc, int64_t cs) {
  constexpr int kPair = NR == 1 ? 1 : 2;
  if (p.M == 1) return Rows<NR>(lut, p, 0, 1, FromCodes{b_rows, ldb, p.K}, n, scl, c, ldc, cs);
  if (p.M <= kRowsA) {
    for (int j = 0; j < NR; j += kPair)
      Rows<kPair>(lut, p, 0, p.M, FromCodes{b_rows + j * ldb, ldb, p.K}, n + j, scl, c + j * cs, ldc, cs);
    return;
  }
  for (int j = 0; j < NR; ++j) {  // masked steps as FromCodes loads them
    const uint8_t* r = b_rows + j * ldb;
    for (int64_t g = 0; g < p.G; ++g) {
      const int64_t k0 = g * p.block_k, len = std::min(p.K, k0 + p.block_k) - k0;
      uint16_t* d = buf + j * p.lda + g * p.gstride;
      int64_t s = 0;
      for (; s + kStep <= len; s += kStep) {
        _mm_prefetch(reinterpret_cast<const char*>(r + k0 + s + PrefetchAhead(k0 + s, ldb, p.K, NR, 1)),
                     _MM_HINT_T0);
        lut(_mm512_loadu_si512(r + k0 + s), d + s);
      }
      if (s < len) lut(_mm512_maskz_loadu_epi8(Mask64(len - s), r + k0 + s), d + s);
    }
  }
  for (int64_t m = 0; m < p.M; m += kBufferRowsA)
    Rows<NR>(lut, p, m, std::min<int64_t>(kBufferRowsA, p.M - m), FromBuffer{buf, p.lda}, n, scl, c, ldc, cs);
}

}  // namespace

__attribute__((target("avx512vbmi"))) void PackAGroupScaledAvx512(const uint8_t* a, int64_t K, int64_t rows,
                                                                  int64_t block_k, int64_t gstride, int64_t lda,
                                                                  void* dst) {
  const Fp8ToBf16Lut lut;
  const int64_t G = (K + block_k - 1) / block_k;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k0 = g * block_k, len = std::min(K, k0 + block_k) - k0;
      uint16_t* d = static_cast<uint16_t*>(dst) + r * lda + g * gstride;
      for (int64_t s = 0; s < gstride; s += kStep)
        lut(_mm512_maskz_loadu_epi8(Mask64(len - s), a + r * K + k0 + s), d + s);
    }
}

__attribute__((target("avx512vbmi"))) void GroupScaledSumsAvx512(const GroupScaledRows& p, int64_t n0, int64_t n1,
                                                                 void* scratch, float* c, int64_t ldc) {
  const Fp8ToBf16Lut lut;
  auto* scl = static_cast<float*>(scratch);
  auto* buf = reinterpret_cast<uint16_t*>(scl + GroupScaledScaleFloats(p.G));
  const StreamGroups gs = GroupsFor(p.M, n1 - n0);
  for (int64_t g = 0; g < gs.groups; ++g) {
    const int64_t first = n0 + g * gs.first;
    const int64_t n[kPanelRows] = {first, first + gs.stride, first + 2 * gs.stride, first + 3 * gs.stride};
    Group<kPanelRows>(lut, p, p.b + first * p.K, gs.stride * p.K, n, scl, buf, c + (first - n0), ldc, gs.stride);
  }
  for (int64_t r = n0 + kPanelRows * gs.groups; r < n1; ++r)
    Group<1>(lut, p, p.b + r * p.K, p.K, &r, scl, buf, c + (r - n0), ldc, 1);
}

}  // namespace vt::cpu::matmul
