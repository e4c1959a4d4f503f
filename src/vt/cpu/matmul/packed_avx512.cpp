// fp8 GEMM on weights re-laid out once (AVX-512 BF16 + VBMI): the outer-product form.
//
// The other kernels form dot products along K (acc[m][n] += a[m, k..k+31] · b[n, k..k+31],
// lanes summed at the end), which costs one 64-byte load of a and one of b per
// vdpbf16ps pair in a 4 x 4 tile; L1 does not feed that at two vdpbf16ps per cycle, so
// even with the operands in L1 the multiplies stay well short of their peak. Here each f32
// lane is one output column instead: a weight block holds 16 columns and, per step of 4 K
// values, 64 codes laid out so that the fp8 table's decode (two vpermt2b, one vpternlog,
// two vpunpck) gives the two BF16 pair vectors vdpbf16ps wants ([col 0: k0 k1][col 1:
// k0 k1]... and the same for k2 k3); each row of a enters as a broadcast BF16 pair, so a
// step costs one weight load per 16 columns and two 4-byte broadcasts per row of a, and no
// lane sums, which lets the multiplies run near their peak rate (bench/kernel_notes.md has
// the measurements of both forms).
//
// Layout (PackedWeightBytes): block j (columns 16j..16j+15) is RoundUp(K, 4) / 4 steps of
// 64 bytes; in step s the code of column 16j + 4L + i at K offset 4s + t sits at byte
// 16L + 8(t / 2) + 2i + t % 2 (L, i, t in 0..3). Columns past N and K values past K are
// zero codes (their results are not stored; zero times the zero padding of a adds +0).
//
// BF16 weights (Avx512Bf16PackedBf16Kernels) take the same blocks and tiles with nothing to
// decode: a step is 128 bytes, the two pair vectors as vdpbf16ps reads them (column c's
// BF16 values at K offsets 4s, 4s + 1 at bytes 4c, 4c + 2; those at 4s + 2, 4s + 3 at 64 +
// 4c, 64 + 4c + 2), i.e. each block is the transpose of its 16 rows' 32-bit K pairs.
#include "vt/cpu/avx512_common.h"  // first: intrinsics and their warning settings

#include <algorithm>
#include <cstring>

#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/local.h"

namespace vt::cpu::matmul {

namespace {

constexpr int64_t kCols = 16;  // one f32 vector of results
constexpr int64_t kStep = 64;                // bytes per step of 4 K values
// Bytes ahead in each block's stream to prefetch (as far as the streaming paths).
constexpr int64_t kAhead = 1536;

constexpr int BytePos(int64_t col, int64_t t) {
  return static_cast<int>(16 * (col / 4) + 8 * (t / 2) + 2 * (col % 4) + t % 2);
}

// Any part of a block, code by code (tails: the last block's missing columns, the last
// K values).
void PackBlockScalar(const uint8_t* b, int64_t N, int64_t K, int64_t j, int64_t s0, uint8_t* d) {
  const int64_t steps = (K + 3) / 4;
  for (int64_t s = s0; s < steps; ++s) {
    uint8_t* out = d + s * kStep;
    for (int64_t col = 0; col < kCols; ++col) {
      const int64_t n = j * kCols + col;
      for (int64_t t = 0; t < 4; ++t) {
        const int64_t k = 4 * s + t;
        out[BytePos(col, t)] = n < N && k < K ? b[n * K + k] : 0;
      }
    }
  }
}

// A whole block (16 columns present), 16 K values at a time: four zmm of 4 rows x 16
// codes each (register L = rows 4L..4L+3, one per 128-bit lane), one byte permute per
// register puts each step's codes of those 4 rows into lane s, and a 4 x 4 transpose of
// 128-bit lanes gathers lane s of the four registers into step s.
__attribute__((target("avx512vbmi"))) void PackBlock(const uint8_t* b, int64_t N, int64_t K, int64_t j,
                                                     uint8_t* d) {
  if ((j + 1) * kCols > N) return PackBlockScalar(b, N, K, j, 0, d);
  alignas(64) uint8_t idx_bytes[64];
  for (int s = 0; s < 4; ++s)  // lane s of the permuted register: step s of the 4 rows
    for (int r = 0; r < 16; ++r) {
      const int t = 2 * (r / 8) + r % 2, i = (r % 8) / 2;
      idx_bytes[16 * s + r] = static_cast<uint8_t>(16 * i + 4 * s + t);
    }
  const __m512i idx = _mm512_load_si512(idx_bytes);
  const uint8_t* rows = b + j * kCols * K;
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512i p[4];
    for (int L = 0; L < 4; ++L) {
      const uint8_t* r = rows + 4 * L * K + k;
      __m512i z = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r)));
      z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + K)), 1);
      z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * K)), 2);
      z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 3 * K)), 3);
      p[L] = _mm512_permutexvar_epi8(idx, z);
    }
    const __m512i t0 = _mm512_shuffle_i64x2(p[0], p[1], 0x44), t1 = _mm512_shuffle_i64x2(p[0], p[1], 0xEE);
    const __m512i t2 = _mm512_shuffle_i64x2(p[2], p[3], 0x44), t3 = _mm512_shuffle_i64x2(p[2], p[3], 0xEE);
    uint8_t* out = d + (k / 4) * kStep;
    _mm512_storeu_si512(out, _mm512_shuffle_i64x2(t0, t2, 0x88));
    _mm512_storeu_si512(out + kStep, _mm512_shuffle_i64x2(t0, t2, 0xDD));
    _mm512_storeu_si512(out + 2 * kStep, _mm512_shuffle_i64x2(t1, t3, 0x88));
    _mm512_storeu_si512(out + 3 * kStep, _mm512_shuffle_i64x2(t1, t3, 0xDD));
  }
  if (k < K) PackBlockScalar(b, N, K, j, k / 4, d);
}

size_t PackedBytes(int64_t N, int64_t K) {
  return static_cast<size_t>((N + kCols - 1) / kCols) * static_cast<size_t>((K + 3) / 4 * kStep);
}

__attribute__((target("avx512vbmi"))) int64_t PackWeights(const uint8_t* b, int64_t N, int64_t K, int64_t block0,
                                                          int64_t block1, uint8_t* dst) {
  const size_t block_bytes = static_cast<size_t>((K + 3) / 4 * kStep);
  for (int64_t j = block0; j < block1; ++j) PackBlock(b, N, K, j, dst + j * block_bytes);
  return 0;  // the table decodes NaN codes to NaN
}

// Rows of fp8 a as BF16 in K order, zero from K to lda (a multiple of 64). The table's
// decode interleaves 8-code groups of the two halves of its 64 codes; a byte permute
// first puts them where that interleave takes them back to K order.
__attribute__((target("avx512vbmi"))) void PackA(const uint8_t* a, int64_t K, int64_t rows, void* dst_v,
                                                 int64_t lda) {
  auto* dst = static_cast<uint16_t*>(dst_v);
  const Fp8ToBf16Lut lut;
  alignas(64) uint8_t idx_bytes[64];
  for (int L = 0; L < 4; ++L)
    for (int q = 0; q < 8; ++q) {
      idx_bytes[16 * L + q] = static_cast<uint8_t>(8 * L + q);
      idx_bytes[16 * L + 8 + q] = static_cast<uint8_t>(32 + 8 * L + q);
    }
  const __m512i idx = _mm512_load_si512(idx_bytes);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < lda; k += 64) {
      __m512i w0, w1;
      lut.Decode(_mm512_permutexvar_epi8(idx, _mm512_maskz_loadu_epi8(Mask64(K - k), a + r * K + k)), w0, w1);
      _mm512_storeu_si512(dst + r * lda + k, w0);
      _mm512_storeu_si512(dst + r * lda + k + 32, w1);
    }
}

// BF16 weights: bytes per step of 4 K values.
constexpr int64_t kStepBf16 = 128;
template <bool kBf16>
constexpr int64_t StepBytes() {
  return kBf16 ? kStepBf16 : kStep;
}

// ---- BF16 weights ----

size_t PackedBytesBf16(int64_t N, int64_t K) {
  return static_cast<size_t>((N + kCols - 1) / kCols) * static_cast<size_t>((K + 3) / 4 * kStepBf16);
}

// Blocks [block0, block1) of the BF16 rows b [N, K]: 32-bit word q of a block's column c is
// that row's BF16 pair at K offsets 2q, 2q + 1, at word 16q + c of the block (zero past N
// and past K).
int64_t PackWeightsBf16(const uint8_t* bytes, int64_t N, int64_t K, int64_t block0, int64_t block1, uint8_t* dst) {
  const auto* b = reinterpret_cast<const uint16_t*>(bytes);
  const int64_t pairs = (K + 3) / 4 * 2, full = K / 2;  // pairs per column; those with both values in K
  for (int64_t j = block0; j < block1; ++j) {
    auto* d = reinterpret_cast<uint32_t*>(dst + static_cast<size_t>(j) * static_cast<size_t>(pairs / 2 * kStepBf16));
    for (int64_t col = 0; col < kCols; ++col) {
      const int64_t n = j * kCols + col;
      if (n >= N) {
        for (int64_t q = 0; q < pairs; ++q) d[q * kCols + col] = 0;
        continue;
      }
      const uint16_t* row = b + n * K;
      for (int64_t q = 0; q < full; ++q) {
        uint32_t pair;
        std::memcpy(&pair, row + 2 * q, 4);
        d[q * kCols + col] = pair;
      }
      for (int64_t q = full; q < pairs; ++q) d[q * kCols + col] = 2 * q < K ? row[2 * q] : 0u;  // the low half
    }
  }
  return 0;  // BF16 values are kept as they are, NaNs included
}

// Rows of BF16 a in K order, zero from K to lda.
void PackABf16(const uint8_t* bytes, int64_t K, int64_t rows, void* dst_v, int64_t lda) {
  const auto* a = reinterpret_cast<const uint16_t*>(bytes);
  auto* dst = static_cast<uint16_t*>(dst_v);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * lda, a + r * K, static_cast<size_t>(K) * 2);
    std::memset(dst + r * lda + K, 0, static_cast<size_t>(lda - K) * 2);
  }
}

// c[i * ldc + j * c_stride + l] = Σ_k a[i, k] · w[column l of block j, k] for MR rows of a
// and NB blocks (w_stride bytes apart), over `steps` steps of 4 K values; kBf16: BF16
// weight blocks, loaded as they are. next != 0: each step also prefetches into L2 the same
// bytes `next` on from each block (a later row tile, whose blocks the first one brought in,
// fetching the blocks the next tiles read while it multiplies; GemmPacked).
template <bool kBf16, int MR, int NB>
__attribute__((target("avx512vbmi"), noinline)) void Tile(const Fp8ToBf16Lut& lut, const uint16_t* a, int64_t lda,
                                                          const uint8_t* w, int64_t w_stride, int64_t steps,
                                                          float* c, int64_t ldc, int64_t c_stride, int64_t next) {
  __m512 acc[MR][NB];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t s = 0; s < steps; ++s) {
    __m512bh w0[NB], w1[NB];
    for (int j = 0; j < NB; ++j) {
      const uint8_t* p = w + j * w_stride + s * StepBytes<kBf16>();
      _mm_prefetch(reinterpret_cast<const char*>(p + kAhead), _MM_HINT_T0);
      if (next != 0) {
        _mm_prefetch(reinterpret_cast<const char*>(p + next), _MM_HINT_T1);
        if constexpr (kBf16) _mm_prefetch(reinterpret_cast<const char*>(p + next + 64), _MM_HINT_T1);
      }
      __m512i x0, x1;
      if constexpr (kBf16) {
        _mm_prefetch(reinterpret_cast<const char*>(p + kAhead + 64), _MM_HINT_T0);
        x0 = _mm512_loadu_si512(p);
        x1 = _mm512_loadu_si512(p + 64);
      } else {
        lut.Decode(_mm512_loadu_si512(p), x0, x1);
      }
      w0[j] = reinterpret_cast<__m512bh>(x0);
      w1[j] = reinterpret_cast<__m512bh>(x1);
    }
    for (int i = 0; i < MR; ++i) {
      int32_t p0, p1;  // BF16 pairs (k, k + 1) and (k + 2, k + 3) of row i
      std::memcpy(&p0, a + i * lda + 4 * s, 4);
      std::memcpy(&p1, a + i * lda + 4 * s + 2, 4);
      const __m512bh a0 = reinterpret_cast<__m512bh>(_mm512_set1_epi32(p0));
      const __m512bh a1 = reinterpret_cast<__m512bh>(_mm512_set1_epi32(p1));
      for (int j = 0; j < NB; ++j) {
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], a0, w0[j]);
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], a1, w1[j]);
      }
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NB; ++j) _mm512_storeu_ps(c + i * ldc + j * c_stride, acc[i][j]);
}

using TileFn = void (*)(const Fp8ToBf16Lut&, const uint16_t*, int64_t, const uint8_t*, int64_t, int64_t, float*,
                        int64_t, int64_t, int64_t);

// Tiles by rows of a (1..8) and blocks (1, 2 or 4; 4 only up to 4 rows): at most 16
// accumulators, which with the decoded weights, the table and the broadcasts fit in the
// 32 vector registers.
template <bool kBf16, int MR>
constexpr TileFn TileFor(int nb) {
  if constexpr (MR <= 4) {
    if (nb >= 4) return &Tile<kBf16, MR, 4>;
  }
  return nb >= 2 ? &Tile<kBf16, MR, 2> : &Tile<kBf16, MR, 1>;
}
template <bool kBf16>
TileFn ChooseTile(int64_t mr, int nb) {
  switch (mr) {
    case 1: return TileFor<kBf16, 1>(nb);
    case 2: return TileFor<kBf16, 2>(nb);
    case 3: return TileFor<kBf16, 3>(nb);
    case 4: return TileFor<kBf16, 4>(nb);
    case 5: return TileFor<kBf16, 5>(nb);
    case 6: return TileFor<kBf16, 6>(nb);
    case 7: return TileFor<kBf16, 7>(nb);
    default: return TileFor<kBf16, 8>(nb);
  }
}

// All M rows of a against blocks [block0, block1): c[m * ldc + 16 (j - block0) + l].
// Up to 4 rows: one row tile with 4 blocks, in parts; more: tiles of up to 8 rows with 2
// adjacent blocks (ForEachPackedTile).
template <bool kBf16>
__attribute__((target("avx512vbmi"))) void GemmPacked(const void* av, int64_t lda, int64_t M,
                                                      const uint8_t* packed, int64_t K, int64_t block0,
                                                      int64_t block1, float* c, int64_t ldc) {
  const auto* a = static_cast<const uint16_t*>(av);
  const Fp8ToBf16Lut lut;
  const int64_t steps = (K + 3) / 4;
  const int64_t block_bytes = steps * StepBytes<kBf16>();
  const int group = M <= 4 ? 4 : 2;
  const int64_t rows_per_tile = M <= 4 ? M : 8;
  // Decode rows past the first tile (the parts walk, M 9..16): the tile's blocks are in L2,
  // brought by the first tile, so it fetches the next blocks of its parts (one block on).
  ForEachPackedTile(M, rows_per_tile, block0, block1, group,
                    [&](int64_t mr, int64_t m, int64_t j, int nb, int64_t stride) {
                      const int64_t next = m > 0 && M <= kPackedPartsMaxRows && j + 1 < block1 ? block_bytes : 0;
                      ChooseTile<kBf16>(mr, nb)(lut, a + m * lda, lda, packed + j * block_bytes,
                                                stride * block_bytes, steps, c + m * ldc + (j - block0) * kCols, ldc,
                                                stride * kCols, next);
                    });
}

// MatmulFp8GroupScaled on the same blocks (GroupScaledPackedAvx512, matmul/kernels.h): Tile's
// steps group by group of K, each group's sums from zero, then added into c (L1) times the
// (row, column, group) scale s_a · s_b; the first group's product is stored. Each (row,
// column) lane gets the same operations in the same order whatever MR and NB are.
template <int MR, int NB>
__attribute__((target("avx512vbmi"), noinline)) void GroupScaledTile(const Fp8ToBf16Lut& lut,
                                                                     const GroupScaledPacked& p, int64_t m,
                                                                     const uint8_t* w, int64_t w_stride, int64_t j,
                                                                     int64_t j_stride, float* c, int64_t ldc,
                                                                     int64_t c_stride) {
  const uint16_t* a = static_cast<const uint16_t*>(p.a) + m * p.lda;
  for (int64_t g = 0; g < p.G; ++g) {
    const int64_t k0 = g * p.block_k, k1 = std::min(p.K, k0 + p.block_k);
    __m512 acc[MR][NB];
    for (int i = 0; i < MR; ++i)
      for (int jj = 0; jj < NB; ++jj) acc[i][jj] = _mm512_setzero_ps();
    for (int64_t s = k0 / 4; s < (k1 + 3) / 4; ++s) {
      __m512bh w0[NB], w1[NB];
      for (int jj = 0; jj < NB; ++jj) {
        const uint8_t* q = w + jj * w_stride + s * kStep;
        _mm_prefetch(reinterpret_cast<const char*>(q + kAhead), _MM_HINT_T0);
        __m512i x0, x1;
        lut.Decode(_mm512_loadu_si512(q), x0, x1);
        w0[jj] = reinterpret_cast<__m512bh>(x0);
        w1[jj] = reinterpret_cast<__m512bh>(x1);
      }
      for (int i = 0; i < MR; ++i) {
        int32_t p0, p1;  // BF16 pairs (k, k + 1) and (k + 2, k + 3) of row i
        std::memcpy(&p0, a + i * p.lda + 4 * s, 4);
        std::memcpy(&p1, a + i * p.lda + 4 * s + 2, 4);
        const __m512bh a0 = reinterpret_cast<__m512bh>(_mm512_set1_epi32(p0));
        const __m512bh a1 = reinterpret_cast<__m512bh>(_mm512_set1_epi32(p1));
        for (int jj = 0; jj < NB; ++jj) {
          acc[i][jj] = _mm512_dpbf16_ps(acc[i][jj], a0, w0[jj]);
          acc[i][jj] = _mm512_dpbf16_ps(acc[i][jj], a1, w1[jj]);
        }
      }
    }
    for (int jj = 0; jj < NB; ++jj) {
      const int64_t blk = j + jj * j_stride;
      const __m512 sb = p.sb_lanes != nullptr ? _mm512_loadu_ps(p.sb_lanes + (blk * p.G + g) * kCols)
                                              : _mm512_set1_ps(p.sb[(blk * kCols / p.block_n) * p.G + g]);
      for (int i = 0; i < MR; ++i) {
        const __m512 sc = _mm512_mul_ps(_mm512_set1_ps(p.sa[(m + i) * p.G + g]), sb);
        float* cp = c + i * ldc + jj * c_stride;
        const __m512 prev = g == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(cp);
        _mm512_storeu_ps(cp, _mm512_fmadd_ps(acc[i][jj], sc, prev));
      }
    }
  }
}

using GroupScaledTileFn = void (*)(const Fp8ToBf16Lut&, const GroupScaledPacked&, int64_t, const uint8_t*, int64_t,
                                   int64_t, int64_t, float*, int64_t, int64_t);
template <int MR>
constexpr GroupScaledTileFn GroupScaledTileFor(int nb) {
  if constexpr (MR <= 4) {
    if (nb >= 4) return &GroupScaledTile<MR, 4>;
  }
  return nb >= 2 ? &GroupScaledTile<MR, 2> : &GroupScaledTile<MR, 1>;
}
GroupScaledTileFn ChooseGroupScaledTile(int64_t mr, int nb) {
  switch (mr) {
    case 1: return GroupScaledTileFor<1>(nb);
    case 2: return GroupScaledTileFor<2>(nb);
    case 3: return GroupScaledTileFor<3>(nb);
    case 4: return GroupScaledTileFor<4>(nb);
    case 5: return GroupScaledTileFor<5>(nb);
    case 6: return GroupScaledTileFor<6>(nb);
    case 7: return GroupScaledTileFor<7>(nb);
    default: return GroupScaledTileFor<8>(nb);
  }
}

}  // namespace

__attribute__((target("avx512vbmi"))) void GroupScaledPackedAvx512(const GroupScaledPacked& p, const uint8_t* packed,
                                                                   int64_t block0, int64_t block1, float* c,
                                                                   int64_t ldc) {
  const Fp8ToBf16Lut lut;
  const int64_t block_bytes = (p.K + 3) / 4 * kStep;
  const int group = p.M <= 4 ? 4 : 2;
  const int64_t rows_per_tile = p.M <= 4 ? p.M : 8;
  ForEachPackedTile(p.M, rows_per_tile, block0, block1, group,
                    [&](int64_t mr, int64_t m, int64_t j, int nb, int64_t stride) {
                      ChooseGroupScaledTile(mr, nb)(lut, p, m, packed + j * block_bytes, stride * block_bytes, j,
                                                    stride, c + m * ldc + (j - block0) * kCols, ldc, stride * kCols);
                    });
}

const PackedKernels& Avx512Bf16PackedKernels() {
  static const PackedKernels k{"avx512bf16-outer16", kCols, 2, 64, 1.0f, true,
                               &PackedBytes, &PackWeights, &PackA, &GemmPacked<false>};
  return k;
}

const PackedKernels& Avx512Bf16PackedBf16Kernels() {
  static const PackedKernels k{"avx512bf16-outer16-bf16", kCols, 2, 64, 1.0f, true, &PackedBytesBf16,
                               &PackWeightsBf16, &PackABf16, &GemmPacked<true>, nullptr, DType::kBF16};
  return k;
}

}  // namespace vt::cpu::matmul
