// AMX kernel set (compiled with AVX-512 and AMX-TILE/AMX-BF16): the BF16-pairs set's
// packing and packed GEMM, with every GEMM of 4..4096 rows of a run on AMX tiles instead
// of vdpbf16ps: decode (M <= 16) streams the weight through the tiles, prefill runs a
// tiled GEMM (the wide path below).
//
// Why: a step of M rows of a does M·K·N multiply-adds; with vdpbf16ps (32 per instruction)
// that bounds M = 4..16 below the memory bandwidth on server cores (vt_kernels_bench's
// multiply limit; bench/kernel_notes.md). One tdpbf16ps does 16 x M x 32 of them.
//
// Layout: the weight is the tiles' left operand, the rows of a the right one, so no weight
// is ever transposed: per 16 weight rows and 64-value K step, the fp8 rows are decoded to
// BF16 by the same table as the AVX-512 set (so K is permuted within the 64-block exactly
// as a's packed rows are) and staged as two 16 x 32 tiles; BF16 rows load as tiles
// straight from the weight. a is rearranged once per matmul (the driver calls
// PrepareStreamA, which the stream calls of every thread then share) into the pair-
// interleaved ("VNNI") layout tdpbf16ps takes on its right: per block of 16 rows of a and
// 32-value K slice, 16 K pairs by 16 rows (zero past M). The 16 x M f32 sums stay in a tile
// across K and are stored transposed into c.
//
// Numerics: every product of two BF16 values is exact in f32 and is added with round-to-
// nearest-even; BF16 denormal inputs count as zero and denormal sums are flushed (as
// vdpbf16ps does; fp8 values and their products never come near that range).
#include "vt/cpu/avx512_common.h"  // first: intrinsics and their warning settings

#include <algorithm>
#include <cstring>
#include <new>

#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/local.h"

namespace vt::cpu::matmul {

namespace {

constexpr int kTileRows = 16;  // weight rows per tile block (the AMX maximum)
static_assert(kStreamABlockRows == 16, "a prepared block of rows is one 16-column tile");
constexpr int kMaxM = 16;      // rows of a per call: the columns of one sums tile
// Fewer rows of a take the AVX-512 set's vdpbf16ps stream: the tiles add a store and a
// tile load per decoded vector, and one or two rows of a leave them mostly idle; from
// M = 4 their multiply rate outweighs that (bench/kernel_notes.md has the measurements).
constexpr int64_t kAmxMinM = 4;
// Every GEMM up to this many rows of a runs on the tiles (the wide path past kMaxM);
// longer ones take the set's packed vdpbf16ps GEMM, whose accumulators would otherwise
// need M x 256 floats per thread.
constexpr int64_t kStreamMaxM = 4096;

// Palette 1: tmm0, tmm1 the two 16 x 32 BF16 weight slices of a 64-value K step; tmm2,
// tmm3 a's matching slices (16 K pairs x M rows); tmm4, tmm5 f32 sums [16 weight rows][M],
// one per slice, so the two tdpbf16ps of a step do not wait on each other; tmm6, tmm7 the
// same for the next block of weight rows (blocks alternate between the two pairs).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

TileConfig ConfigFor(int64_t M) {
  TileConfig c;
  const auto m_bytes = static_cast<uint16_t>(M * 4);
  for (int t : {0, 1}) c.colsb[t] = 64, c.rows[t] = kTileRows;
  for (int t : {2, 3}) c.colsb[t] = m_bytes, c.rows[t] = 16;
  for (int t : {4, 5, 6, 7}) c.colsb[t] = m_bytes, c.rows[t] = kTileRows;
  return c;
}

// Row offsets, in 32-bit words, of 16 rows of a lda BF16 values apart.
inline __m512i RowWords(int64_t lda) {
  return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32(static_cast<int>(lda / 2)));
}

// Lane m = K pair r of slice s (values 32s + 2r, 32s + 2r + 1) of row m of a, for the rows
// in `rows` (zero elsewhere): one gather per pair.
inline __m512i GatherPair(const uint16_t* a, __m512i row_words, __mmask16 rows, int64_t s, int64_t r) {
  return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), rows, row_words,
                                     reinterpret_cast<const int*>(a) + 16 * s + r, 4);
}

struct alignas(64) Staging {
  uint16_t half[2][kTileRows * 32];  // the two weight slices of a K step, rows 64 bytes apart
  float sums[2][kTileRows * kMaxM];
};

// c[m * ldc + j] for the rows of a block of a (16 rows from m0, `mrows` real) and j < rows,
// from a 16 x 16 sums tile stored as sums[j * 16 + m] (64-byte aligned): a 16 x 16
// transpose in registers (32-bit, then 64-bit interleaves within 128-bit lanes, then two
// rounds of 128-bit lane shuffles), one masked store per row of a.
void StoreTile(const float* sums, int64_t rows, int64_t mrows, float* c, int64_t ldc) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    const __m512 r0 = _mm512_load_ps(sums + 32 * i), r1 = _mm512_load_ps(sums + 32 * i + 16);
    t[2 * i] = _mm512_unpacklo_ps(r0, r1);  // per lane L: r0[4L], r1[4L], r0[4L+1], r1[4L+1]
    t[2 * i + 1] = _mm512_unpackhi_ps(r0, r1);
  }
  const auto pd = [](__m512 x) { return _mm512_castps_pd(x); };
  for (int q = 0; q < 4; ++q) {  // u[4q + e], lane L: element 4L + e of sums rows 4q..4q+3
    const __m512* tq = t + 4 * q;
    u[4 * q + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(tq[0]), pd(tq[2])));
    u[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(tq[0]), pd(tq[2])));
    u[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(tq[1]), pd(tq[3])));
    u[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(tq[1]), pd(tq[3])));
  }
  const auto mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int e = 0; e < 4; ++e) {
    const __m512 x02 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88), x13 = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xDD);
    const __m512 y02 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
    const __m512 y13 = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xDD);
    const __m512 col[4] = {_mm512_shuffle_f32x4(x02, y02, 0x88), _mm512_shuffle_f32x4(x13, y13, 0x88),
                           _mm512_shuffle_f32x4(x02, y02, 0xDD), _mm512_shuffle_f32x4(x13, y13, 0xDD)};
    for (int l = 0; l < 4; ++l) {  // row of a m = 4l + e: its 16 sums, lane j = weight row j
      const int64_t m = 4 * l + e;
      if (m < mrows) _mm512_mask_storeu_ps(c + m * ldc, mask, col[l]);
    }
  }
}

// The tile intrinsics take literal register numbers: pair kAcc's operations spelled out.
template <int kAcc>
inline void ZeroPair() {
  if constexpr (kAcc == 4) {
    _tile_zero(4);
    _tile_zero(5);
  } else {
    _tile_zero(6);
    _tile_zero(7);
  }
}
template <int kAcc>
inline void DotPair() {  // kAcc += tmm0 x tmm2, kAcc + 1 += tmm1 x tmm3
  if constexpr (kAcc == 4) {
    _tile_dpbf16ps(4, 0, 2);
    _tile_dpbf16ps(5, 1, 3);
  } else {
    _tile_dpbf16ps(6, 0, 2);
    _tile_dpbf16ps(7, 1, 3);
  }
}
template <int kAcc>
inline void StorePair(float* s0, float* s1) {  // rows 64 bytes apart
  if constexpr (kAcc == 4) {
    _tile_stored(4, s0, 64);
    _tile_stored(5, s1, 64);
  } else {
    _tile_stored(6, s0, 64);
    _tile_stored(7, s1, 64);
  }
}

// A block's sums waiting in their tile pair to be stored: rows weight rows for c.
struct PendingSums {
  float* c = nullptr;
  int64_t rows = 0;
};

// The sums of the block in tile pair kAcc (4: tmm4, tmm5; 6: tmm6, tmm7) into p.c: the two
// slices' sums added (the block's only rounding after the tiles), transposed into c's rows.
template <int kAcc>
void StoreSums(const PendingSums& p, int64_t M, Staging& st, int64_t ldc) {
  StorePair<kAcc>(st.sums[0], st.sums[1]);
  for (int j = 0; j < kTileRows; ++j)
    _mm512_store_ps(st.sums[0] + 16 * j,
                    _mm512_add_ps(_mm512_load_ps(st.sums[0] + 16 * j), _mm512_load_ps(st.sums[1] + 16 * j)));
  StoreTile(st.sums[0], p.rows, M, p.c, ldc);
}

// One block of `rows` (<= 16) weight rows of length K against the M rows of a (block 0 of
// the prepared vnni), into tile pair kAcc: per 64-value K step, the first 32 values (tmm0 x
// tmm2) add into tile kAcc, the second (tmm1 x tmm3) into kAcc + 1. The sums stay there (the
// caller stores them); the previous block's, in the other pair, are stored a few steps in,
// when its last products are long done: storing them at the block's own end waited for the
// tiles to drain and held up the next block's first products (bench/kernel_notes.md).
template <int kAcc>
__attribute__((target("avx512vbmi"))) void Block(const Fp8ToBf16Lut& lut, DType dt, const void* b, int64_t K,
                                                 int64_t rows, const uint32_t* vnni, int64_t M, Staging& st,
                                                 PendingSums& previous, int64_t ldc) {
  constexpr int kOther = kAcc == 4 ? 6 : 4;
  // Rows past the block's end stay zero in the staging tiles.
  if (rows < kTileRows)
    for (auto& h : st.half) std::memset(h + rows * 32, 0, static_cast<size_t>((kTileRows - rows) * 64));
  ZeroPair<kAcc>();
  const int64_t store_at = std::min<int64_t>(2 * 64, (K - 1) / 64 * 64);  // a K step's offset
  for (int64_t k = 0; k < K; k += 64) {
    const bool full = k + 64 <= K;
    if (dt == DType::kF8E4M3) {
      const auto* p = static_cast<const uint8_t*>(b) + k;
      const int64_t ahead = AdjacentAhead(k, K, kTileRows, 1);
      for (int64_t j = 0; j < rows; ++j) {
        const uint8_t* row = p + j * K;
        __m512i x;
        if (full) {
          _mm_prefetch(reinterpret_cast<const char*>(row + ahead), _MM_HINT_T0);
          x = _mm512_loadu_si512(row);
        } else {
          x = _mm512_maskz_loadu_epi8(Mask64(K - k), row);
        }
        __m512i w0, w1;
        lut.Decode(x, w0, w1);
        _mm512_store_si512(st.half[0] + j * 32, w0);
        _mm512_store_si512(st.half[1] + j * 32, w1);
      }
      _tile_loadd(0, st.half[0], 64);
      _tile_loadd(1, st.half[1], 64);
    } else {
      const auto* p = static_cast<const uint16_t*>(b) + k;
      if (full && rows == kTileRows) {
        // BF16 rows are tiles already: load them straight from the weight.
        const int64_t ahead = AdjacentAhead(k, K, kTileRows, 2);
        for (int64_t j = 0; j < rows; ++j) {
          const char* row = reinterpret_cast<const char*>(p + j * K);
          _mm_prefetch(row + ahead, _MM_HINT_T0);
          _mm_prefetch(row + ahead + 64, _MM_HINT_T0);
        }
        _tile_loadd(0, p, K * 2);
        _tile_loadd(1, p + 32, K * 2);
      } else {
        const __mmask32 m0 = Mask32(K - k), m1 = Mask32(K - k - 32);
        for (int64_t j = 0; j < rows; ++j) {
          _mm512_store_si512(st.half[0] + j * 32, _mm512_maskz_loadu_epi16(m0, p + j * K));
          _mm512_store_si512(st.half[1] + j * 32, _mm512_maskz_loadu_epi16(m1, p + j * K + 32));
        }
        _tile_loadd(0, st.half[0], 64);
        _tile_loadd(1, st.half[1], 64);
      }
    }
    _tile_loadd(2, vnni + (k / 32) * 256, 64);
    _tile_loadd(3, vnni + (k / 32 + 1) * 256, 64);
    DotPair<kAcc>();
    if (k == store_at && previous.c != nullptr) {
      StoreSums<kOther>(previous, M, st, ldc);
      previous.c = nullptr;
    }
  }
}

// ---- Many rows of a (prefill) ---------------------------------------------------------
//
// Rows of a in super-blocks of its prepared blocks of 16, and K in blocks, sized so that a
// super-block's K block of a stays in L2 (it is read again for every weight block); per K
// block, weight rows in pairs of 16-row blocks are decoded once per super-block into a
// BF16 staging area. Each 32-value K slice loads two weight tiles (tmm0, tmm1) and two a
// tiles (tmm2, tmm3) for four tdpbf16ps into tmm4..tmm7: four multiplies per four tile
// loads. Between K blocks the f32 sums wait in memory (stored and loaded as they are, so
// the additions happen in the same order as without K blocks).

constexpr int64_t kWideABytes = 512 << 10;  // a super-block's K block of interleaved a
constexpr int64_t kWideSuperRows = 256;     // rows of a per super-block
constexpr int64_t kWideKBlock = kWideABytes / (kWideSuperRows * 2);  // K values per block
static_assert(kWideKBlock % 64 == 0, "K blocks hold whole 64-value decode steps");

// All eight tiles 16 rows x 64 bytes (a blocks are full 16-column tiles).
TileConfig WideConfig() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) c.colsb[t] = 64, c.rows[t] = 16;
  return c;
}

// vnni[(b * slices + s) * 256 + r * 16 + m] = pair r of slice s of row 16b + m of a (zero for
// rows past M), for the blocks b in [block0, block1); a holds M packed rows of lda BF16
// values (lda a multiple of 64). The set's prepare_stream_a.
void PairInterleaveBlocks(const void* av, int64_t lda, int64_t M, int64_t block0, int64_t block1, void* dst) {
  const auto* a = static_cast<const uint16_t*>(av);
  auto* vnni = static_cast<uint32_t*>(dst);
  const int64_t slices = lda / 32;
  const __m512i rw = RowWords(lda);
  for (int64_t b = block0; b < block1; ++b) {
    const int64_t n = std::min<int64_t>(16, M - 16 * b);
    const auto rows = static_cast<__mmask16>((1u << n) - 1);
    const uint16_t* ab = a + 16 * b * lda;
    for (int64_t s = 0; s < slices; ++s)
      for (int64_t r = 0; r < 16; ++r)
        _mm512_storeu_si512(vnni + ((b * slices + s) * 16 + r) * 16, GatherPair(ab, rw, rows, s, r));
  }
}

// 64-byte aligned scratch that grows and is kept per thread. (Not matmul.cpp's Scratch: its
// unique_ptr members instantiated here would be compiled for AMX/AVX-512, and the linker
// may keep that copy for code meant to run anywhere.)
template <typename T>
struct AlignedBuffer {
  T* p = nullptr;
  size_t size = 0;
  T* Get(size_t n) {
    if (n > size) {
      Free();
      p = static_cast<T*>(::operator new[](n * sizeof(T), std::align_val_t{64}));
      size = n;
    }
    return p;
  }
  void Free() {
    if (p != nullptr) ::operator delete[](p, std::align_val_t{64});
    p = nullptr;
  }
  ~AlignedBuffer() { Free(); }
};

// Values [k0, k0 + width) of 16 weight rows (K values each, `rows` real), decoded (fp8) or
// copied (BF16) to `width` BF16 values per row at w: zero past K and for rows past `rows`.
__attribute__((target("avx512vbmi"))) void StageRows(const Fp8ToBf16Lut& lut, DType dt, const void* b, int64_t K,
                                                     int64_t k0, int64_t width, int64_t rows, uint16_t* w) {
  for (int64_t j = 0; j < kTileRows; ++j) {
    uint16_t* dst = w + j * width;
    if (j >= rows) {
      std::memset(dst, 0, static_cast<size_t>(width) * 2);
      continue;
    }
    if (dt == DType::kF8E4M3) {
      const uint8_t* row = static_cast<const uint8_t*>(b) + j * K;
      for (int64_t k = 0; k < width; k += 64) {
        __m512i w0, w1;
        lut.Decode(_mm512_maskz_loadu_epi8(Mask64(K - k0 - k), row + k0 + k), w0, w1);
        _mm512_store_si512(dst + k, w0);
        _mm512_store_si512(dst + k + 32, w1);
      }
    } else {
      const uint16_t* row = static_cast<const uint16_t*>(b) + j * K;
      for (int64_t k = 0; k < width; k += 32)
        _mm512_store_si512(dst + k, _mm512_maskz_loadu_epi16(Mask32(K - k0 - k), row + k0 + k));
    }
  }
}

__attribute__((target("avx512vbmi"))) void StreamWide(const Fp8ToBf16Lut& lut, DType dt, const uint32_t* vnni,
                                                      int64_t lda, int64_t M, const void* bv, int64_t K,
                                                      int64_t nrows, float* c, int64_t ldc) {
  thread_local AlignedBuffer<uint16_t> staging;
  thread_local AlignedBuffer<float> partial;
  alignas(64) float sums[256];
  const int64_t slices = lda / 32, kblock = std::min(lda, kWideKBlock);
  const int64_t wblocks = (nrows + kTileRows - 1) / kTileRows;
  uint16_t* w0 = staging.Get(static_cast<size_t>(2 * kTileRows * kblock));
  uint16_t* w1 = w0 + kTileRows * kblock;
  const size_t row_bytes = static_cast<size_t>(K) * (dt == DType::kF8E4M3 ? 1 : 2);
  const auto* b = static_cast<const std::byte*>(bv);
  const TileConfig cfg = WideConfig();
  _tile_loadconfig(&cfg);
  for (int64_t m0 = 0; m0 < M; m0 += kWideSuperRows) {
    const int64_t ms = std::min(kWideSuperRows, M - m0);
    const int64_t blocks = (ms + 15) / 16;
    const uint32_t* v = vnni + (m0 / 16) * slices * 256;
    // The sums of a block of a (i) and a weight block (j) between K blocks.
    float* part = kblock < lda ? partial.Get(static_cast<size_t>(blocks * wblocks * 256)) : nullptr;
    auto part_of = [&](int64_t i, int64_t j) { return part + (i * wblocks + j) * 256; };
    for (int64_t k0 = 0; k0 < lda; k0 += kblock) {
      const int64_t kw = std::min(kblock, lda - k0), s0 = k0 / 32;
      const bool first = k0 == 0, last = k0 + kw >= lda;
      for (int64_t n = 0; n < nrows; n += 2 * kTileRows) {
        const int64_t rows0 = std::min<int64_t>(kTileRows, nrows - n);
        const int64_t rows1 = std::min<int64_t>(kTileRows, std::max<int64_t>(0, nrows - n - kTileRows));
        const bool two_w = rows1 > 0;
        const int64_t j0 = n / kTileRows;
        StageRows(lut, dt, b + static_cast<size_t>(n) * row_bytes, K, k0, kw, rows0, w0);
        if (two_w) StageRows(lut, dt, b + static_cast<size_t>(n + kTileRows) * row_bytes, K, k0, kw, rows1, w1);
        for (int64_t blk = 0; blk < blocks; blk += 2) {
          const bool two_a = blk + 1 < blocks;
          const uint32_t* v0 = v + blk * slices * 256;
          const uint32_t* v1 = v0 + slices * 256;
          if (first) {
            _tile_zero(4);
            _tile_zero(5);
            _tile_zero(6);
            _tile_zero(7);
          } else {
            _tile_loadd(4, part_of(blk, j0), 64);
            if (two_a) _tile_loadd(5, part_of(blk + 1, j0), 64);
            if (two_w) _tile_loadd(6, part_of(blk, j0 + 1), 64);
            if (two_a && two_w) _tile_loadd(7, part_of(blk + 1, j0 + 1), 64);
          }
          for (int64_t s = 0; s < kw / 32; ++s) {
            _tile_loadd(0, w0 + s * 32, kw * 2);
            _tile_loadd(2, v0 + (s0 + s) * 256, 64);
            _tile_dpbf16ps(4, 0, 2);
            if (two_a) {
              _tile_loadd(3, v1 + (s0 + s) * 256, 64);
              _tile_dpbf16ps(5, 0, 3);
            }
            if (two_w) {
              _tile_loadd(1, w1 + s * 32, kw * 2);
              _tile_dpbf16ps(6, 1, 2);
              if (two_a) _tile_dpbf16ps(7, 1, 3);
            }
          }
          if (!last) {
            _tile_stored(4, part_of(blk, j0), 64);
            if (two_a) _tile_stored(5, part_of(blk + 1, j0), 64);
            if (two_w) _tile_stored(6, part_of(blk, j0 + 1), 64);
            if (two_a && two_w) _tile_stored(7, part_of(blk + 1, j0 + 1), 64);
            continue;
          }
          const int64_t m_a0 = std::min<int64_t>(16, ms - 16 * blk), m_a1 = std::min<int64_t>(16, ms - 16 * (blk + 1));
          float* c00 = c + (m0 + 16 * blk) * ldc + n;  // a block blk, weight block 0
          _tile_stored(4, sums, 64);
          StoreTile(sums, rows0, m_a0, c00, ldc);
          if (two_a) {
            _tile_stored(5, sums, 64);
            StoreTile(sums, rows0, m_a1, c00 + 16 * ldc, ldc);
          }
          if (two_w) {
            _tile_stored(6, sums, 64);
            StoreTile(sums, rows1, m_a0, c00 + kTileRows, ldc);
            if (two_a) {
              _tile_stored(7, sums, 64);
              StoreTile(sums, rows1, m_a1, c00 + 16 * ldc + kTileRows, ldc);
            }
          }
        }
      }
    }
  }
  _tile_release();
}

// The set's stream_a_bytes: the pair-interleaved blocks of a where the tiles take M.
size_t StreamABytes(DType, int64_t lda, int64_t M) {
  if (M < kAmxMinM) return 0;
  return static_cast<size_t>((M + 15) / 16 * (lda / 32) * 256) * sizeof(uint32_t);
}

// The set's stream_inner: the tiles from kAmxMinM rows of a (StreamAmx's own branch).
Inner StreamInner(DType, int64_t M) { return M < kAmxMinM ? Inner::kPlain : Inner::kAmxTiles; }

// The set's stream entry: c[m * ldc + n] = Σ_k a[m, k]·b[n, k] for m < M, n < nrows; a is
// the packed rows below kAmxMinM, their pair-interleaved blocks from it.
__attribute__((target("avx512vbmi"))) void StreamAmx(DType dt, const void* av, int64_t lda, int64_t M,
                                                     const void* bv, int64_t K, int64_t nrows, float* c,
                                                     int64_t ldc) {
  if (M < kAmxMinM) {
    Avx512Bf16Kernels().stream(dt, av, lda, M, bv, K, nrows, c, ldc);
    return;
  }
  if (dt != DType::kF8E4M3 && dt != DType::kBF16) ThrowUnsupportedPack("amx stream", dt);
  const auto* vnni = static_cast<const uint32_t*>(av);  // prepared by PairInterleaveBlocks
  if (M > kMaxM) {
    StreamWide(Fp8ToBf16Lut(), dt, vnni, lda, M, bv, K, nrows, c, ldc);
    return;
  }
  thread_local Staging st;
  const TileConfig cfg = ConfigFor(M);
  _tile_loadconfig(&cfg);
  const Fp8ToBf16Lut lut;
  const size_t row_bytes = static_cast<size_t>(K) * (dt == DType::kF8E4M3 ? 1 : 2);
  // Blocks alternate between the sums pairs; each block stores its predecessor's.
  PendingSums previous;
  for (int64_t n = 0; n < nrows; n += kTileRows) {
    const void* b = static_cast<const std::byte*>(bv) + static_cast<size_t>(n) * row_bytes;
    const int64_t rows = std::min<int64_t>(kTileRows, nrows - n);
    const bool even = n / kTileRows % 2 == 0;
    if (even)
      Block<4>(lut, dt, b, K, rows, vnni, M, st, previous, ldc);
    else
      Block<6>(lut, dt, b, K, rows, vnni, M, st, previous, ldc);
    previous = {c + n, rows};
    if (n + kTileRows >= nrows) {  // the last block's sums
      if (even)
        StoreSums<4>(previous, M, st, ldc);
      else
        StoreSums<6>(previous, M, st, ldc);
    }
  }
  _tile_release();
}

}  // namespace

const KernelSet& AmxKernels() {
  static const KernelSet ks = [] {
    KernelSet k = Avx512Bf16Kernels();
    k.name = "amx-bf16";
    // The packed kernels are not compared with the tiles yet (bench/kernel_notes.md):
    // read-only weights take the AMX paths as stored.
    k.packed = nullptr;
    k.stream = &StreamAmx;
    k.stream_max_m = kStreamMaxM;
    k.stream_a_bytes = &StreamABytes;
    k.prepare_stream_a = &PairInterleaveBlocks;
    k.stream_inner = &StreamInner;
    // One row streams on vdpbf16ps (below kAmxMinM), and so do rows that must keep its sums.
    k.rows_as_one = &Avx512Bf16Kernels();
    return k;
  }();
  return ks;
}


}  // namespace vt::cpu::matmul
