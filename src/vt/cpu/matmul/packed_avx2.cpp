// fp8 GEMM on weights re-laid out once, for AVX2 (F32 FMA on 8 lanes; also run by the
// AVX-512 F32 level): the outer-product form of matmul/packed_avx512.cpp with one output
// column per f32 lane. A weight block holds 8 columns; per pair of K values its 16 codes
// are interleaved (column 0 at k and k + 1, column 1 ...), so one sign extension to 16-bit
// words gives, per 32-bit lane, one column's two codes. Each row of a enters as a
// broadcast f32, so a step of MR rows x NB blocks is NB decodes and 2 MR broadcasts for
// 2 MR NB FMAs, with no lane sums. The decode is the one the streaming path uses
// (Fp8StreamDecode, matmul/kernels.h):
//  - kF32Bits (AMD by default): shifting each lane left by 20 (by 4) and masking puts the
//    low (high) word's magnitude bits and sign into f32 bits: value * 2^-120 for both K
//    values in two instructions each; a is scaled by 2^112 when packed, so every product
//    is a·b·2^-8, exact and far from the f32 limits. fp8 subnormals become f32 subnormals,
//    so the caller's denormals-are-zero is cleared while the kernel runs;
//  - kHalf: the half trick on the 16 words (value * 2^-8 as IEEE halves), a byte shuffle
//    and a quadword permute to separate the two K values, and vcvtph2ps.
// Both decodes turn the NaN codes (S.1111.111) into finite values, so weights holding any
// NaN code are not laid out: pack reports them and the driver multiplies such a weight
// as stored (those paths propagate NaN).
//
// Layout (PackedBytes): block j (columns 8j..8j+7) is RoundUp(K, 2) / 2 steps of 16
// bytes; in step p the code of column 8j + c at K value 2p + t sits at byte 2c + t.
// Columns past N and the K value past an odd K are zero codes.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "vt/cpu/matmul/fp8_decode_avx2.h"
#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/local.h"

namespace vt::cpu::matmul {

namespace {

constexpr int64_t kCols = 8;
constexpr int64_t kStep = 16;  // bytes per pair of K values
// Bytes ahead in each block's stream to prefetch.
constexpr int64_t kAhead = 1024;


inline int64_t CountNan(__m128i x) {
  const __m128i nan = _mm_cmpeq_epi8(_mm_or_si128(x, _mm_set1_epi8(static_cast<char>(0x80))), _mm_set1_epi8(-1));
  return __builtin_popcount(static_cast<unsigned>(_mm_movemask_epi8(nan)));
}

// Columns [8j, 8j + 8) of b as K pairs of 16 interleaved codes (zero codes past N and K);
// returns the NaN codes met. Whole blocks go 16 K values at a time through an 8 x 8
// transpose of 16-bit words (a word: one column's codes at k, k + 1).
int64_t PackBlock(const uint8_t* b, int64_t N, int64_t K, int64_t j, uint8_t* d) {
  int64_t nan = 0;
  int64_t k = 0;
  if ((j + 1) * kCols <= N) {
    const uint8_t* rows = b + j * kCols * K;
    for (; k + 16 <= K; k += 16) {
      __m128i r[8], t[8], u[8];
      for (int i = 0; i < 8; ++i) {
        r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + i * K + k));
        nan += CountNan(r[i]);
      }
      for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);      // rows 2i, 2i+1: words 0..3
        t[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);  // ... words 4..7
      }
      for (int h = 0; h < 2; ++h) {  // rows 0..3 (h = 0) and 4..7 (h = 1)
        u[4 * h + 0] = _mm_unpacklo_epi32(t[4 * h], t[4 * h + 2]);      // words 0, 1 of 4 rows
        u[4 * h + 1] = _mm_unpackhi_epi32(t[4 * h], t[4 * h + 2]);      // words 2, 3
        u[4 * h + 2] = _mm_unpacklo_epi32(t[4 * h + 1], t[4 * h + 3]);  // words 4, 5
        u[4 * h + 3] = _mm_unpackhi_epi32(t[4 * h + 1], t[4 * h + 3]);  // words 6, 7
      }
      auto* out = reinterpret_cast<__m128i*>(d + k / 2 * kStep);
      for (int q = 0; q < 4; ++q) {  // words 2q, 2q + 1: K pairs k/2 + 2q, + 1
        _mm_storeu_si128(out + 2 * q, _mm_unpacklo_epi64(u[q], u[4 + q]));
        _mm_storeu_si128(out + 2 * q + 1, _mm_unpackhi_epi64(u[q], u[4 + q]));
      }
    }
  }
  for (; k < K; k += 2)
    for (int64_t c = 0; c < kCols; ++c)
      for (int64_t t = 0; t < 2; ++t) {
        const int64_t n = j * kCols + c;
        const uint8_t code = n < N && k + t < K ? b[n * K + k + t] : 0;
        nan += (code & 0x7F) == 0x7F;
        d[k / 2 * kStep + 2 * c + t] = code;
      }
  return nan;
}

int64_t BlockBytes(int64_t K) { return (K + 1) / 2 * kStep; }

size_t PackedBytes(int64_t N, int64_t K) { return static_cast<size_t>((N + kCols - 1) / kCols * BlockBytes(K)); }

int64_t PackWeights(const uint8_t* b, int64_t N, int64_t K, int64_t block0, int64_t block1, uint8_t* dst) {
  int64_t nan = 0;
  for (int64_t j = block0; j < block1; ++j) nan += PackBlock(b, N, K, j, dst + j * BlockBytes(K));
  return nan;
}

// Rows of fp8 a as f32 in K order (NaN codes as NaN), zero from K to lda: the exact
// values, times 2^112 for kF32Bits. The values by the half trick (exact: value * 2^-8)
// times 2^8 (or 2^120).
void PackA(const uint8_t* a, int64_t K, int64_t rows, void* dst, int64_t lda) {
  const __m256 scale = _mm256_set1_ps(Fp8DecodeAsF32Bits() ? 0x1p8f * kF32BitsAScale : 0x1p8f);
  for (int64_t r = 0; r < rows; ++r) {
    float* d = static_cast<float*>(dst) + r * lda;
    for (int64_t k = 0; k < lda; k += 8) {
      __m128i x;
      if (k + 8 <= K) {
        x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + r * K + k));
      } else {  // the tail: zero codes past K
        alignas(16) uint8_t codes[16] = {};
        if (k < K) std::memcpy(codes, a + r * K + k, static_cast<size_t>(K - k));
        x = _mm_load_si128(reinterpret_cast<const __m128i*>(codes));
      }
      const __m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(x), 7),
                                      _mm_set1_epi16(static_cast<int16_t>(0xBF80)));
      const __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), scale);
      const __m128i nan8 = _mm_cmpeq_epi8(_mm_or_si128(x, _mm_set1_epi8(static_cast<char>(0x80))), _mm_set1_epi8(-1));
      const __m256 nan = _mm256_castsi256_ps(_mm256_cvtepi8_epi32(nan8));
      _mm256_storeu_ps(d + k, _mm256_blendv_ps(v, _mm256_set1_ps(__builtin_nanf("")), nan));
    }
  }
}

// One step of a block: 16 interleaved codes -> the 8 columns at k (w0) and k + 1 (w1).
template <bool kBits>
__attribute__((always_inline)) inline void Decode(const uint8_t* p, __m256& w0, __m256& w1) {
  const __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  if constexpr (kBits) {
    const __m256i keep = _mm256_set1_epi32(static_cast<int>(0x87F00000u));
    w0 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(s, 20), keep));
    w1 = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(s, 4), keep));
  } else {
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(s, 7), _mm256_set1_epi16(static_cast<int16_t>(0xBF80)));
    // Per 128-bit lane: the even words (K value k) first, then the odd ones; then the
    // lanes' even halves together in the low 128 bits.
    const __m256i split = _mm256_shuffle_epi8(
        h, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7,
                            10, 11, 14, 15));
    const __m256i q = _mm256_permute4x64_epi64(split, 0xD8);
    w0 = _mm256_cvtph_ps(_mm256_castsi256_si128(q));
    w1 = _mm256_cvtph_ps(_mm256_extracti128_si256(q, 1));
  }
}

// c[i * ldc + j * c_stride + l] = 2^-8 Σ_k a[i, k] · w[column l of block j, k] for MR rows
// and NB blocks (w_stride bytes apart) over `pairs` pairs of K values.
template <int MR, int NB, bool kBits>
__attribute__((noinline)) void Tile(const float* a, int64_t lda, const uint8_t* w, int64_t w_stride, int64_t pairs,
                                    float* c, int64_t ldc, int64_t c_stride) {
  __m256 acc[MR][NB];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_setzero_ps();
  auto step = [&](int64_t p) __attribute__((always_inline)) {
    __m256 w0[NB], w1[NB];
    for (int j = 0; j < NB; ++j) Decode<kBits>(w + j * w_stride + p * kStep, w0[j], w1[j]);
    for (int i = 0; i < MR; ++i) {
      const __m256 a0 = _mm256_broadcast_ss(a + i * lda + 2 * p);
      const __m256 a1 = _mm256_broadcast_ss(a + i * lda + 2 * p + 1);
      for (int j = 0; j < NB; ++j) {
        acc[i][j] = _mm256_fmadd_ps(a0, w0[j], acc[i][j]);
        acc[i][j] = _mm256_fmadd_ps(a1, w1[j], acc[i][j]);
      }
    }
  };
  int64_t p = 0;
  for (; p + 4 <= pairs; p += 4) {  // 4 steps: 64 bytes of each block
    for (int j = 0; j < NB; ++j)
      _mm_prefetch(reinterpret_cast<const char*>(w + j * w_stride + p * kStep + kAhead), _MM_HINT_T0);
#pragma GCC unroll 4
    for (int64_t s = 0; s < 4; ++s) step(p + s);
  }
  for (; p < pairs; ++p) step(p);
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NB; ++j) _mm256_storeu_ps(c + i * ldc + j * c_stride, acc[i][j]);
}

// A family of tiles (Tile, GroupScaledTile): Tiles::Fn<MR, NB, kBits> is one shape's.
struct PlainTiles {
  template <int MR, int NB, bool kBits>
  static constexpr auto Fn = &Tile<MR, NB, kBits>;
};

// One row with 4 blocks, two with 3, up to 4 rows with 2: at most 8 accumulators, which
// with the two decoded K values per block, the broadcasts and the decode's constant fit
// in the 16 vector registers. TileFor(nb) has exactly nb blocks for those nb.
template <typename Tiles, int MR, bool kBits>
auto TileFor(int nb) {
  if constexpr (MR == 1) {
    if (nb >= 4) return Tiles::template Fn<MR, 4, kBits>;
  }
  if constexpr (MR == 2) {
    if (nb >= 3) return Tiles::template Fn<MR, 3, kBits>;
  }
  return nb >= 2 ? Tiles::template Fn<MR, 2, kBits> : Tiles::template Fn<MR, 1, kBits>;
}
template <typename Tiles, bool kBits>
auto ChooseTile(int64_t mr, int nb) {
  switch (mr) {
    case 1: return TileFor<Tiles, 1, kBits>(nb);
    case 2: return TileFor<Tiles, 2, kBits>(nb);
    case 3: return TileFor<Tiles, 3, kBits>(nb);
    default: return TileFor<Tiles, 4, kBits>(nb);
  }
}

// MatmulFp8GroupScaled's end of a group of K for a tile's sums (MR rows from row m of a,
// NB blocks j, j + j_stride, ... of the weight; c at the tile's first row and block): c (0
// for the first group) plus the sums times their (row, column, group) scale s_a · s_b · 2^8.
template <int MR, int NB>
__attribute__((always_inline)) inline void ScaleGroupSums(const __m256 (&acc)[MR][NB], const GroupScaledPacked& p,
                                                          int64_t m, int64_t j, int64_t j_stride, int64_t g, float* c,
                                                          int64_t ldc, int64_t c_stride) {
  for (int jj = 0; jj < NB; ++jj) {
    const int64_t blk = j + jj * j_stride;
    const __m256 sb = p.sb_lanes != nullptr ? _mm256_loadu_ps(p.sb_lanes + (blk * p.G + g) * kCols)
                                            : _mm256_set1_ps(p.sb[(blk * kCols / p.block_n) * p.G + g]);
    for (int i = 0; i < MR; ++i) {
      const __m256 sc =
          _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(p.sa[(m + i) * p.G + g]), sb), _mm256_set1_ps(256.0f));
      float* cp = c + i * ldc + jj * c_stride;
      const __m256 prev = g == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(cp);
      _mm256_storeu_ps(cp, _mm256_fmadd_ps(acc[i][jj], sc, prev));
    }
  }
}

// ---- Decoded panels (many rows of a) ---------------------------------------------------
// Tile decodes its blocks once per 4 rows of a, so past a few rows the decode takes the
// FMA ports' time. From kPanelMinRows rows, each pair of blocks is decoded once per
// kPanelPairs pairs of K: the first tile of 4 rows decodes as Tile does and also writes
// the f32 values to a panel (in L1), which tiles of up to 6 rows then read (12
// accumulators cover the FMA latency). Every sum runs through the same FMAs in the same
// order as in Tile and GroupScaledTile (a chunk's sums go to memory and come back
// exactly), so a row's bytes stay those of the row alone. bench/README.md has the
// measurements and kernel_notes.md the designs tried.
constexpr int64_t kPanelMinRows = kAvx2PanelMinRows;
std::atomic<int64_t> g_panel_gemms{0};
constexpr int64_t kPanelPairs = 128;
constexpr int kDecodeTileRows = 4;
constexpr int kPanelTileRows = 6;

// Where a panel tile of MatmulFp8GroupScaled puts its sums at the end of a group of K
// (ScaleGroupSums, as GroupScaledTile).
struct GroupFlush {
  const GroupScaledPacked* p;
  int64_t j, j_stride, g;  // the tile's first block, the blocks' stride, the group
  float* c;                // the tile's first row and block in c
  int64_t ldc, c_stride;
  bool last;  // this chunk ends group g (else the sums go back to s)
};

// s (MR rows, NB blocks s_stride apart) += `pairs` pairs of K against a's values from a;
// with kGroup, at the end of a group (f.last) the sums go to c instead (GroupFlush), row m
// of a being the tile's first. kDecode: the pairs of the NB blocks at w (w_stride bytes
// apart) are decoded and stored to the panel (per pair NB vectors at k, then NB at k + 1),
// and the blocks' next `pairs` pairs are prefetched; otherwise they are read from the panel.
template <int MR, int NB, bool kDecode, bool kBits, bool kGroup>
__attribute__((noinline)) void PanelTile(const float* a, int64_t lda, const uint8_t* w, int64_t w_stride,
                                         float* panel, int64_t pairs, float* s, int64_t lds, int64_t s_stride,
                                         int64_t m, const GroupFlush& f) {
  __m256 acc[MR][NB];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_loadu_ps(s + i * lds + j * s_stride);
  auto step = [&](int64_t p) __attribute__((always_inline)) {
    float* q = panel + p * 2 * NB * kCols;
    __m256 w0[NB], w1[NB];
    if constexpr (kDecode) {
      for (int j = 0; j < NB; ++j) {
        Decode<kBits>(w + j * w_stride + p * kStep, w0[j], w1[j]);
        _mm256_store_ps(q + j * kCols, w0[j]);
        _mm256_store_ps(q + (NB + j) * kCols, w1[j]);
      }
    } else {
      for (int j = 0; j < NB; ++j) w0[j] = _mm256_load_ps(q + j * kCols);
    }
    for (int i = 0; i < MR; ++i) {
      const __m256 a0 = _mm256_broadcast_ss(a + i * lda + 2 * p);
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_fmadd_ps(a0, w0[j], acc[i][j]);
    }
    if constexpr (!kDecode)
      for (int j = 0; j < NB; ++j) w1[j] = _mm256_load_ps(q + (NB + j) * kCols);
    for (int i = 0; i < MR; ++i) {
      const __m256 a1 = _mm256_broadcast_ss(a + i * lda + 2 * p + 1);
      for (int j = 0; j < NB; ++j) acc[i][j] = _mm256_fmadd_ps(a1, w1[j], acc[i][j]);
    }
  };
  int64_t p = 0;
  for (; p + 4 <= pairs; p += 4) {  // 4 steps: 64 bytes of each block
    if constexpr (kDecode)
      for (int j = 0; j < NB; ++j)  // the same bytes of the next chunk
        _mm_prefetch(reinterpret_cast<const char*>(w + j * w_stride + (pairs + p) * kStep), _MM_HINT_T0);
#pragma GCC unroll 4
    for (int64_t t = 0; t < 4; ++t) step(p + t);
  }
  for (; p < pairs; ++p) step(p);
  if constexpr (kGroup) {
    if (f.last) {
      ScaleGroupSums<MR, NB>(acc, *f.p, m, f.j, f.j_stride, f.g, f.c + m * f.ldc, f.ldc, f.c_stride);
      return;
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NB; ++j) _mm256_storeu_ps(s + i * lds + j * s_stride, acc[i][j]);
}

// The tiles that read the panel (kBits only matters to the decode).
template <int NB, bool kGroup>
auto PanelTileFor(int64_t mr) {
  switch (mr) {
    case 1: return &PanelTile<1, NB, false, false, kGroup>;
    case 2: return &PanelTile<2, NB, false, false, kGroup>;
    case 3: return &PanelTile<3, NB, false, false, kGroup>;
    case 4: return &PanelTile<4, NB, false, false, kGroup>;
    case 5: return &PanelTile<5, NB, false, false, kGroup>;
    default: return &PanelTile<6, NB, false, false, kGroup>;
  }
}

// Pairs [p0, p1) of K of blocks j, j + stride (NB of them, at w) for every row of a, chunk by
// chunk: sums from s (rows lds apart, blocks s_stride apart), to s or at the end through f.
template <int NB, bool kBits, bool kGroup>
void PanelChunks(const float* a, int64_t lda, int64_t M, const uint8_t* w, int64_t w_stride, int64_t p0, int64_t p1,
                 float* s, int64_t lds, int64_t s_stride, GroupFlush f) {
  alignas(64) static thread_local float panel[kPanelPairs * 2 * 2 * kCols];
  // After the decoding tile, row tiles as even as tiles of at most kPanelTileRows allow.
  const int64_t tiles = (M - kDecodeTileRows + kPanelTileRows - 1) / kPanelTileRows;
  for (int64_t q0 = p0; q0 < p1; q0 += kPanelPairs) {
    const int64_t n = std::min(p1 - q0, kPanelPairs);
    f.last = q0 + n == p1;
    PanelTile<kDecodeTileRows, NB, true, kBits, kGroup>(a + 2 * q0, lda, w + q0 * kStep, w_stride, panel, n, s, lds,
                                                        s_stride, 0, f);
    for (int64_t t = 0, m = kDecodeTileRows; t < tiles; ++t) {
      const int64_t mr = (M - m) / (tiles - t);
      PanelTileFor<NB, kGroup>(mr)(a + m * lda + 2 * q0, lda, nullptr, 0, panel, n, s + m * lds, lds, s_stride, m, f);
      m += mr;
    }
  }
}

// Zeroes the sums of M rows of NB blocks.
template <int NB>
void ZeroSums(float* s, int64_t M, int64_t lds, int64_t s_stride) {
  for (int64_t m = 0; m < M; ++m)
    for (int j = 0; j < NB; ++j) _mm256_storeu_ps(s + m * lds + j * s_stride, _mm256_setzero_ps());
}

// The pairs of blocks as ForEachPackedTile pairs them (for up to kPackedPartsMaxRows rows,
// block i of each half of the range; past it, adjacent ones), then a last odd block alone:
// group(nb, j, stride) with nb an std::integral_constant.
template <typename Group>
void ForEachPanelGroup(int64_t M, int64_t block0, int64_t block1, Group group) {
  const int64_t twos = (block1 - block0) / 2;
  const bool parts = M <= kPackedPartsMaxRows;
  for (int64_t i = 0; i < twos; ++i)
    group(std::integral_constant<int, 2>{}, block0 + (parts ? i : 2 * i), parts ? twos : int64_t{1});
  for (int64_t j = block0 + 2 * twos; j < block1; ++j) group(std::integral_constant<int, 1>{}, j, int64_t{1});
}

// GemmBlocks from kPanelMinRows rows.
template <bool kBits>
void PanelBlocks(const float* a, int64_t lda, int64_t M, const uint8_t* packed, int64_t K, int64_t block0,
                 int64_t block1, float* c, int64_t ldc) {
  const int64_t block_bytes = BlockBytes(K), pairs = (K + 1) / 2;
  ForEachPanelGroup(M, block0, block1, [&](auto nb, int64_t j, int64_t stride) {
    constexpr int NB = decltype(nb)::value;
    float* cj = c + (j - block0) * kCols;
    ZeroSums<NB>(cj, M, ldc, stride * kCols);
    PanelChunks<NB, kBits, false>(a, lda, M, packed + j * block_bytes, stride * block_bytes, 0, pairs, cj, ldc,
                                  stride * kCols, GroupFlush{});
  });
}

// GroupScaledBlocks from kPanelMinRows rows: group by group of K, each group's sums in a
// scratch of their own, then scaled into c.
template <bool kBits>
void GroupScaledPanelBlocks(const GroupScaledPacked& p, const uint8_t* packed, int64_t block0, int64_t block1,
                            float* c, int64_t ldc) {
  const int64_t block_bytes = BlockBytes(p.K);
  static thread_local std::vector<float> sums;
  sums.resize(static_cast<size_t>(p.M * 2 * kCols));
  ForEachPanelGroup(p.M, block0, block1, [&](auto nb, int64_t j, int64_t stride) {
    constexpr int NB = decltype(nb)::value;
    for (int64_t g = 0; g < p.G; ++g) {
      const int64_t k0 = g * p.block_k, k1 = std::min(p.K, k0 + p.block_k);
      ZeroSums<NB>(sums.data(), p.M, 2 * kCols, kCols);
      const GroupFlush f{&p, j, stride, g, c + (j - block0) * kCols, ldc, stride * kCols, false};
      PanelChunks<NB, kBits, true>(static_cast<const float*>(p.a), p.lda, p.M, packed + j * block_bytes, stride * block_bytes, k0 / 2,
                                   (k1 + 1) / 2, sums.data(), 2 * kCols, kCols, f);
    }
  });
}

template <bool kBits>
void GemmBlocks(const float* a, int64_t lda, int64_t M, const uint8_t* packed, int64_t K, int64_t block0,
                int64_t block1, float* c, int64_t ldc) {
  if (M >= kPanelMinRows) {
    g_panel_gemms.fetch_add(1, std::memory_order_relaxed);
    return PanelBlocks<kBits>(a, lda, M, packed, K, block0, block1, c, ldc);
  }
  const int64_t block_bytes = BlockBytes(K), pairs = (K + 1) / 2;
  const int group = M == 1 ? 4 : M == 2 ? 3 : 2;
  const int64_t rows_per_tile = std::min<int64_t>(M, 4);
  ForEachPackedTile(M, rows_per_tile, block0, block1, group,
                    [&](int64_t mr, int64_t m, int64_t j, int nb, int64_t stride) {
                      const auto tile = ChooseTile<PlainTiles, kBits>(mr, nb);
                      tile(a + m * lda, lda, packed + j * block_bytes, stride * block_bytes, pairs,
                           c + m * ldc + (j - block0) * kCols, ldc, stride * kCols);
                    });
}

void GemmPacked(const void* av, int64_t lda, int64_t M, const uint8_t* packed, int64_t K, int64_t block0,
                int64_t block1, float* c, int64_t ldc) {
  const auto* a = static_cast<const float*>(av);
  if (Fp8DecodeAsF32Bits()) {
    // IEEE arithmetic whatever the caller's MXCSR (see above).
    const unsigned csr = _mm_getcsr();
    constexpr unsigned kDazFtz = 0x8040;
    if ((csr & kDazFtz) != 0) _mm_setcsr(csr & ~kDazFtz);
    GemmBlocks<true>(a, lda, M, packed, K, block0, block1, c, ldc);
    if ((csr & kDazFtz) != 0) _mm_setcsr(csr);
  } else {
    GemmBlocks<false>(a, lda, M, packed, K, block0, block1, c, ldc);
  }
}

// MatmulFp8GroupScaled on the same blocks (GroupScaledPackedAvx2, matmul/kernels.h): Tile's
// steps group by group of K, each group's sums from zero, then added into c (in memory, L1)
// times the (row, column, group) scale s_a · s_b · 2^8; the first group's product is stored.
template <int MR, int NB, bool kBits>
__attribute__((noinline)) void GroupScaledTile(const GroupScaledPacked& p, int64_t m, const uint8_t* w,
                                               int64_t w_stride, int64_t j, int64_t j_stride, float* c, int64_t ldc,
                                               int64_t c_stride) {
  const float* a = static_cast<const float*>(p.a) + m * p.lda;
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t k0 = g * p.block_k, k1 = std::min(p.K, k0 + p.block_k);
    const int64_t p0 = k0 / 2, p1 = (k1 + 1) / 2;
    __m256 acc[MR][NB];
    for (int i = 0; i < MR; ++i)
      for (int jj = 0; jj < NB; ++jj) acc[i][jj] = _mm256_setzero_ps();
    auto step = [&](int64_t q) __attribute__((always_inline)) {
      __m256 w0[NB], w1[NB];
      for (int jj = 0; jj < NB; ++jj) Decode<kBits>(w + jj * w_stride + q * kStep, w0[jj], w1[jj]);
      for (int i = 0; i < MR; ++i) {
        const __m256 a0 = _mm256_broadcast_ss(a + i * p.lda + 2 * q);
        const __m256 a1 = _mm256_broadcast_ss(a + i * p.lda + 2 * q + 1);
        for (int jj = 0; jj < NB; ++jj) {
          acc[i][jj] = _mm256_fmadd_ps(a0, w0[jj], acc[i][jj]);
          acc[i][jj] = _mm256_fmadd_ps(a1, w1[jj], acc[i][jj]);
        }
      }
    };
    int64_t q = p0;
    for (; q + 4 <= p1; q += 4) {  // 4 steps: 64 bytes of each block
      for (int jj = 0; jj < NB; ++jj)
        _mm_prefetch(reinterpret_cast<const char*>(w + jj * w_stride + q * kStep + kAhead), _MM_HINT_T0);
#pragma GCC unroll 4
      for (int64_t t = 0; t < 4; ++t) step(q + t);
    }
    for (; q < p1; ++q) step(q);
    ScaleGroupSums<MR, NB>(acc, p, m, j, j_stride, g, c, ldc, c_stride);
  }
}

struct GroupScaledTiles {
  template <int MR, int NB, bool kBits>
  static constexpr auto Fn = &GroupScaledTile<MR, NB, kBits>;
};

template <bool kBits>
void GroupScaledBlocks(const GroupScaledPacked& p, const uint8_t* packed, int64_t block0, int64_t block1, float* c,
                       int64_t ldc) {
  if (p.M >= kPanelMinRows) {
    g_panel_gemms.fetch_add(1, std::memory_order_relaxed);
    return GroupScaledPanelBlocks<kBits>(p, packed, block0, block1, c, ldc);
  }
  const int64_t block_bytes = BlockBytes(p.K);
  const int group = p.M == 1 ? 4 : p.M == 2 ? 3 : 2;
  ForEachPackedTile(p.M, std::min<int64_t>(p.M, 4), block0, block1, group,
                    [&](int64_t mr, int64_t m, int64_t j, int nb, int64_t stride) {
                      const auto tile = ChooseTile<GroupScaledTiles, kBits>(mr, nb);
                      tile(p, m, packed + j * block_bytes, stride * block_bytes, j, stride,
                           c + m * ldc + (j - block0) * kCols, ldc, stride * kCols);
                    });
}

// The inner path GemmPacked takes now (its own branch's predicate).
Inner PackedInner() { return Fp8DecodeAsF32Bits() ? Inner::kF32Bits : Inner::kPlain; }

}  // namespace

void GroupScaledPackedAvx2(const GroupScaledPacked& p, const uint8_t* packed, int64_t block0, int64_t block1, float* c,
                           int64_t ldc) {
  if (Fp8DecodeAsF32Bits()) {
    // IEEE arithmetic whatever the caller's MXCSR (as GemmPacked).
    const unsigned csr = _mm_getcsr();
    constexpr unsigned kDazFtz = 0x8040;
    if ((csr & kDazFtz) != 0) _mm_setcsr(csr & ~kDazFtz);
    GroupScaledBlocks<true>(p, packed, block0, block1, c, ldc);
    if ((csr & kDazFtz) != 0) _mm_setcsr(csr);
  } else {
    GroupScaledBlocks<false>(p, packed, block0, block1, c, ldc);
  }
}

int64_t Avx2PanelGemms() { return g_panel_gemms.load(std::memory_order_relaxed); }

const PackedKernels& Avx2PackedKernels() {
  static const PackedKernels k{"avx2-outer8", kCols, 4, 8, 256.0f, false, &PackedBytes, &PackWeights, &PackA,
                                  &GemmPacked, &PackedInner};
  return k;
}

}  // namespace vt::cpu::matmul
