// AVX-512 matmul kernel sets (compiled with AVX-512 F/BW/VL/DQ/BF16):
//  - BF16 pairs: fp8 (through a 128-entry magnitude table) and BF16 operands packed to
//    BF16 (exact: every e4m3fn value is a BF16 value), multiplied with vdpbf16ps.
//    Each product of two BF16 values is exact in f32 and is added into the f32 lane with
//    round-to-nearest-even. The instruction treats BF16 denormal inputs as zero and
//    flushes denormal results: fp8 values and their products (>= 2^-18) never come near
//    that range.
//  - F32 FMA on 16 lanes, for F32 operands and for processors without AVX512-BF16.
//
// fp8 -> f16 trick (F32 set): sign-extend the byte to 16 bits and shift left by 7; with bit 14
// cleared this is an IEEE half whose 5-bit exponent field holds the e4m3 exponent (bias 7
// instead of 15) and whose mantissa holds the 3 e4m3 mantissa bits: exactly value * 2^-8,
// subnormals included, converted to f32 by vcvtph2ps. The NaN codes (S.1111.111) are
// mapped to a half NaN. The driver multiplies results by 2^8 per fp8 operand.
#include "vt/cpu/avx512_common.h"  // first: intrinsics and their warning settings

#include <algorithm>
#include <cstring>

#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/local.h"

namespace vt::cpu::matmul {

namespace {

constexpr float kFp8Unscale = 256.0f;
constexpr int kRowsA = 4;
constexpr int64_t kPrefetchBytes = 1024;
// Largest M on the BF16 set's streaming path: below it the weights' memory stream bounds
// the time and a panel only adds a write and a re-read.
constexpr int64_t kStreamMaxMBf16 = 16;

inline __mmask16 Mask16(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
}

// ---- BF16 pairs ---------------------------------------------------------------------

// The set needs AVX512-VBMI for its fp8 table (every AVX512-BF16 processor since Ice
// Lake and Zen 4 has it); without it the F32 set runs.
bool AcceptsBf16(DType d) {
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi");
  return vbmi && (d == DType::kF8E4M3 || d == DType::kBF16);
}

__attribute__((target("avx512vbmi"))) void PackBf16(DType dt, const void* src, int64_t src_ld, int64_t rows,
                                                    int64_t k0, int64_t kc, void* dst, int64_t ld, int64_t kcp) {
  const Fp8ToBf16Lut lut;
  for (int64_t r = 0; r < rows; ++r) {
    auto* d = static_cast<uint16_t*>(dst) + r * ld;
    if (dt == DType::kF8E4M3) {
      const auto* p = static_cast<const uint8_t*>(src) + r * src_ld + k0;
      int64_t k = 0;
      for (; k + 64 <= kc; k += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p + k + kPrefetchBytes), _MM_HINT_T0);
        lut(_mm512_loadu_si512(p + k), d + k);
      }
      for (; k < kcp; k += 64) lut(_mm512_maskz_loadu_epi8(Mask64(kc - k), p + k), d + k);
    } else if (dt == DType::kBF16) {
      const auto* p = static_cast<const uint16_t*>(src) + r * src_ld + k0;
      for (int64_t k = 0; k < kcp; k += 32) {
        if (k + kPrefetchBytes / 2 < kc) _mm_prefetch(reinterpret_cast<const char*>(p + k + kPrefetchBytes / 2), _MM_HINT_T0);
        _mm512_storeu_si512(d + k, _mm512_maskz_loadu_epi16(Mask32(kc - k), p + k));
      }
    } else {
      ThrowUnsupportedPack("avx512bf16", dt);
    }
  }
}

template <int MR>
void TileBf16(const uint16_t* a, int64_t lda, const uint16_t* p, int64_t ldp, int64_t kcp, float* c, int64_t ldc) {
  __m512 acc[MR][kPanelRows];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kPanelRows; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kcp; k += 32) {
    __m512bh bv[kPanelRows];
    for (int j = 0; j < kPanelRows; ++j) bv[j] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p + j * ldp + k));
    for (int i = 0; i < MR; ++i) {
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a + i * lda + k));
      for (int j = 0; j < kPanelRows; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], av, bv[j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    const __m128 s = Hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    _mm_storeu_ps(c + i * ldc, _mm_add_ps(_mm_loadu_ps(c + i * ldc), s));
  }
}

// ---- F32 FMA ------------------------------------------------------------------------

bool AcceptsF32(DType d) { return d == DType::kF8E4M3 || d == DType::kBF16 || d == DType::kF32; }

void PackF32(DType dt, const void* src, int64_t src_ld, int64_t rows, int64_t k0, int64_t kc, void* dst,
             int64_t ld, int64_t kcp) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = static_cast<float*>(dst) + r * ld;
    const int64_t s = r * src_ld + k0;
    if (dt == DType::kF8E4M3) {
      const auto* p = static_cast<const uint8_t*>(src) + s;
      for (int64_t k = 0; k < kcp; k += 16) {
        if (k + kPrefetchBytes < kc) _mm_prefetch(reinterpret_cast<const char*>(p + k + kPrefetchBytes), _MM_HINT_T0);
        _mm512_storeu_ps(d + k, _mm512_cvtph_ps(Fp8ToHalf16(_mm_maskz_loadu_epi8(Mask16(kc - k), p + k))));
      }
    } else if (dt == DType::kBF16) {
      const auto* p = static_cast<const uint16_t*>(src) + s;
      for (int64_t k = 0; k < kcp; k += 16) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(Mask16(kc - k), p + k));
        _mm512_storeu_si512(d + k, _mm512_slli_epi32(w, 16));
      }
    } else if (dt == DType::kF32) {
      const float* p = static_cast<const float*>(src) + s;
      for (int64_t k = 0; k < kcp; k += 16) _mm512_storeu_ps(d + k, _mm512_maskz_loadu_ps(Mask16(kc - k), p + k));
    } else {
      ThrowUnsupportedPack("avx512", dt);
    }
  }
}

template <int MR>
void TileF32(const float* a, int64_t lda, const float* p, int64_t ldp, int64_t kcp, float* c, int64_t ldc) {
  __m512 acc[MR][kPanelRows];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kPanelRows; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kcp; k += 16) {
    __m512 bv[kPanelRows];
    for (int j = 0; j < kPanelRows; ++j) bv[j] = _mm512_loadu_ps(p + j * ldp + k);
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_loadu_ps(a + i * lda + k);
      for (int j = 0; j < kPanelRows; ++j) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    const __m128 s = Hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    _mm_storeu_ps(c + i * ldc, _mm_add_ps(_mm_loadu_ps(c + i * ldc), s));
  }
}

// c += a · pᵀ over MR-row blocks of a (outer, kept in L1) and 4-row panel tiles (inner).
template <typename T, template <int> class Tile>
void GemmBlocks(const void* av, int64_t lda, int64_t M, const void* pv, int64_t ldp, int64_t nrows, int64_t kcp,
                float* c, int64_t ldc) {
  const T* a = static_cast<const T*>(av);
  const T* p = static_cast<const T*>(pv);
  for (int64_t m = 0; m < M; m += kRowsA) {
    const int64_t mr = std::min<int64_t>(kRowsA, M - m);
    for (int64_t n = 0; n < nrows; n += kPanelRows) {
      const T* am = a + m * lda;
      const T* pn = p + n * ldp;
      float* cm = c + m * ldc + n;
      switch (mr) {
        case 4: Tile<4>::Run(am, lda, pn, ldp, kcp, cm, ldc); break;
        case 3: Tile<3>::Run(am, lda, pn, ldp, kcp, cm, ldc); break;
        case 2: Tile<2>::Run(am, lda, pn, ldp, kcp, cm, ldc); break;
        default: Tile<1>::Run(am, lda, pn, ldp, kcp, cm, ldc); break;
      }
    }
  }
}

template <int MR>
struct Bf16Tile {
  static void Run(const uint16_t* a, int64_t lda, const uint16_t* p, int64_t ldp, int64_t kcp, float* c, int64_t ldc) {
    TileBf16<MR>(a, lda, p, ldp, kcp, c, ldc);
  }
};
template <int MR>
struct F32Tile {
  static void Run(const float* a, int64_t lda, const float* p, int64_t ldp, int64_t kcp, float* c, int64_t ldc) {
    TileF32<MR>(a, lda, p, ldp, kcp, c, ldc);
  }
};

static_assert(kRowsA == 4, "GemmBlocks dispatches tiles of 1..4 rows");

// ---- Streaming decode (small M) -----------------------------------------------------
//
// Weight rows stream straight from memory into vdpbf16ps: per group of kPanelRows rows,
// 64 K values per row and step (fp8 decoded in registers by the table above, BF16 loaded
// as is), against a's packed rows (L1). No panel is written; each weight byte is read
// once. The fp8 decode permutes K within 64-blocks exactly as PackBf16 does for a.

// A share of the next group's weight bytes (StreamGroupAllRows): `lines` cache lines from p,
// spread over the `steps` full K steps of a tile, prefetched into L2.
struct NextShare {
  const char* p = nullptr;
  int64_t lines = 0, per = 0;  // per: lines a step, ceil(lines / steps)
  __attribute__((always_inline)) void Prefetch(int64_t step) const {
    const int64_t l1 = std::min(lines, (step + 1) * per);
    for (int64_t l = step * per; l < l1; ++l) _mm_prefetch(p + 64 * l, _MM_HINT_T1);
  }
};

// acc[i][j] += the 64-value K step k of row i of a (packed, lda apart) times the NR weight
// rows' step, already in BF16 as w[j][0..1]: each row of a is loaded once for all NR rows.
template <int MR, int NR>
__attribute__((always_inline)) inline void MultiplyStep(const uint16_t* a, int64_t lda, int64_t k,
                                                        const __m512bh (&w)[NR][2], __m512 (&acc)[MR][NR]) {
  for (int i = 0; i < MR; ++i) {
    const __m512bh a0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a + i * lda + k));
    const __m512bh a1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(a + i * lda + k + 32));
    for (int j = 0; j < NR; ++j) {
      acc[i][j] = _mm512_dpbf16_ps(acc[i][j], w[j][0], a0);
      acc[i][j] = _mm512_dpbf16_ps(acc[i][j], w[j][1], a1);
    }
  }
}

// One 64-value K step of NR fp8 weight rows (masked: the row's tail) against MR rows of a,
// prefetching `ahead` bytes on from each row's position. The NR rows are decoded first and
// each row of a is then loaded once for them (so MR x NR accumulators + 2 NR weight
// registers stay in the 32 vector registers for MR x NR = 16).
template <int MR, int NR, bool kFull>
__attribute__((target("avx512vbmi"), always_inline)) inline void StreamFp8Step(
    const Fp8ToBf16Lut& lut, const uint16_t* a, int64_t lda, const uint8_t* b, int64_t ldb, int64_t k, int64_t ahead,
    __mmask64 mask, __m512 (&acc)[MR][NR]) {
  __m512bh w[NR][2];
  for (int j = 0; j < NR; ++j) {
    const uint8_t* p = b + j * ldb + k;
    __m512i x;
    if constexpr (kFull) {
      _mm_prefetch(reinterpret_cast<const char*>(p + ahead), _MM_HINT_T0);
      x = _mm512_loadu_si512(p);
    } else {
      x = _mm512_maskz_loadu_epi8(mask, p);
    }
    __m512i w0, w1;
    lut.Decode(x, w0, w1);
    w[j][0] = reinterpret_cast<__m512bh>(w0);
    w[j][1] = reinterpret_cast<__m512bh>(w1);
  }
  MultiplyStep<MR, NR>(a, lda, k, w, acc);
}

// NR weight rows of length K, ldb elements apart (see GroupsFor), against MR rows of a;
// sums to c[i * ldc + j * cs].
template <int MR, int NR>
__attribute__((target("avx512vbmi"), always_inline)) inline void StreamFp8Tile(
    const Fp8ToBf16Lut& lut, const uint16_t* a, int64_t lda, const uint8_t* b, int64_t ldb, int64_t K, float* c,
    int64_t ldc, int64_t cs, const NextShare& next) {
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
    next.Prefetch(k / 64);
    StreamFp8Step<MR, NR, true>(lut, a, lda, b, ldb, k, PrefetchAhead(k, ldb, K, NR, 1), 0, acc);
  }
  if (k < K) StreamFp8Step<MR, NR, false>(lut, a, lda, b, ldb, k, 0, Mask64(K - k), acc);
  StoreSums<MR, NR>(acc, c, ldc, cs);
}

// The same for BF16 weight rows (loaded as they are).
template <int MR, int NR>
__attribute__((always_inline)) inline void StreamBf16Tile(const uint16_t* a, int64_t lda, const uint16_t* b,
                                                          int64_t ldb, int64_t K, float* c, int64_t ldc, int64_t cs,
                                                          const NextShare& next) {
  __m512 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  auto step = [&](int64_t k, __mmask32 m0, __mmask32 m1, bool full) __attribute__((always_inline)) {
    __m512bh w[NR][2];
    for (int j = 0; j < NR; ++j) {
      const uint16_t* p = b + j * ldb + k;
      if (full) {
        const int64_t ahead = PrefetchAhead(k, ldb, K, NR, 2);
        _mm_prefetch(reinterpret_cast<const char*>(p) + ahead, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p) + ahead + 64, _MM_HINT_T0);
        w[j][0] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
        w[j][1] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(p + 32));
      } else {
        w[j][0] = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(m0, p));
        w[j][1] = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(m1, p + 32));
      }
    }
    MultiplyStep<MR, NR>(a, lda, k, w, acc);
  };
  int64_t k = 0;
  for (; k + 64 <= K; k += 64) {
    next.Prefetch(k / 64);
    step(k, 0, 0, true);
  }
  if (k < K) step(k, Mask32(K - k), Mask32(K - k - 32), false);
  StoreSums<MR, NR>(acc, c, ldc, cs);
}

// One group of NR weight rows (ldb elements apart) against MR rows of a.
template <int MR, int NR>
__attribute__((target("avx512vbmi"))) void StreamGroup(const Fp8ToBf16Lut& lut, DType dt, const uint16_t* a,
                                                       int64_t lda, const void* b, int64_t ldb, int64_t K, float* c,
                                                       int64_t ldc, int64_t cs, const NextShare& next) {
  if (dt == DType::kF8E4M3) {
    StreamFp8Tile<MR, NR>(lut, a, lda, static_cast<const uint8_t*>(b), ldb, K, c, ldc, cs, next);
  } else {
    StreamBf16Tile<MR, NR>(a, lda, static_cast<const uint16_t*>(b), ldb, K, c, ldc, cs, next);
  }
}

// The group against all M rows of a, in blocks of kRowsA: the group's weight rows stay
// in L1/L2 after the first block. Every block of rows of a reads all NR weight rows of the
// group, so NR weight streams run from memory at once; fewer weight rows against more rows
// of a would decode each weight fewer times but stream fewer rows at once, which costs more
// from memory than it saves (bench/kernel_notes.md has the comparison).
// With more than kRowsA rows of a, only the first block reads the group from memory and the
// later ones multiply it from L1: those later blocks prefetch the next group's bytes
// (`next`, `next_bytes`; none if null) into L2 in equal shares over their K steps, so the
// memory stream of one group runs under the multiplies of the one before it.
template <int NR>
__attribute__((target("avx512vbmi"))) void StreamGroupAllRows(const Fp8ToBf16Lut& lut, DType dt, const uint16_t* a,
                                                              int64_t lda, int64_t M, const void* b, int64_t ldb,
                                                              int64_t K, float* c, int64_t ldc, int64_t cs,
                                                              const std::byte* next, int64_t next_bytes) {
  const int64_t blocks = (M + kRowsA - 1) / kRowsA, later = blocks - 1;
  const int64_t lines = next != nullptr && later > 0 ? (next_bytes + 63) / 64 : 0;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t m = blk * kRowsA;
    const uint16_t* am = a + m * lda;
    float* cm = c + m * ldc;
    NextShare share;
    if (blk > 0 && lines > 0) {
      const int64_t l0 = lines * (blk - 1) / later, l1 = lines * blk / later;
      const int64_t steps = std::max<int64_t>(1, K / 64);
      share = NextShare{reinterpret_cast<const char*>(next) + 64 * l0, l1 - l0, (l1 - l0 + steps - 1) / steps};
    }
    switch (std::min<int64_t>(kRowsA, M - m)) {
      case 4: StreamGroup<4, NR>(lut, dt, am, lda, b, ldb, K, cm, ldc, cs, share); break;
      case 3: StreamGroup<3, NR>(lut, dt, am, lda, b, ldb, K, cm, ldc, cs, share); break;
      case 2: StreamGroup<2, NR>(lut, dt, am, lda, b, ldb, K, cm, ldc, cs, share); break;
      default: StreamGroup<1, NR>(lut, dt, am, lda, b, ldb, K, cm, ldc, cs, share); break;
    }
  }
}

// c[m * ldc + n] = Σ_k a[m, k]·b[n, k] for m < M, n < nrows; a packed (lda a multiple of
// 64, zero-padded), b the raw [nrows, K] weight rows; groups laid out as matmul/local.h
// describes (quarters for up to 4 rows of a, adjacent rows otherwise).
__attribute__((target("avx512vbmi"))) void StreamBf16(DType dt, const void* av, int64_t lda, int64_t M,
                                                      const void* bv, int64_t K, int64_t nrows, float* c,
                                                      int64_t ldc) {
  if (dt != DType::kF8E4M3 && dt != DType::kBF16) ThrowUnsupportedPack("avx512bf16 stream", dt);
  const Fp8ToBf16Lut lut;
  const auto* a = static_cast<const uint16_t*>(av);
  const size_t row_bytes = static_cast<size_t>(K) * (dt == DType::kF8E4M3 ? 1 : 2);
  const auto* b = static_cast<const std::byte*>(bv);
  const StreamGroups gs = GroupsFor(M, nrows);
  // The next group or tail row after each (rows [r, r1) of these nrows; only the adjacent
  // layout, M > 4, has more than one block of rows of a and prefetches them).
  auto rows_from = [&](int64_t r) { return r < nrows ? b + static_cast<size_t>(r) * row_bytes : nullptr; };
  const int64_t tail0 = kPanelRows * gs.groups;
  for (int64_t g = 0; g < gs.groups; ++g) {
    const int64_t r = (g + 1) * gs.first, r1 = g + 1 < gs.groups ? r + kPanelRows : std::min(nrows, tail0 + 1);
    StreamGroupAllRows<kPanelRows>(lut, dt, a, lda, M, b + static_cast<size_t>(g * gs.first) * row_bytes,
                                   gs.stride * K, K, c + g * gs.first, ldc, gs.stride, rows_from(r),
                                   static_cast<int64_t>((r1 - r) * row_bytes));
  }
  for (int64_t n = tail0; n < nrows; ++n)
    StreamGroupAllRows<1>(lut, dt, a, lda, M, b + static_cast<size_t>(n) * row_bytes, K, K, c + n, ldc, 1,
                          rows_from(n + 1), static_cast<int64_t>(row_bytes));
}

}  // namespace

const KernelSet& Avx512Bf16Kernels() {
  static const KernelSet ks{"avx512bf16-dpbf16", 64, 2, 1.0f, &AcceptsBf16, &PackBf16,
                            &GemmBlocks<uint16_t, Bf16Tile>, &StreamBf16, kStreamMaxMBf16, nullptr, nullptr,
                            &Avx512Bf16PackedKernels(), nullptr,
                            &ks,  // rows_as_one: a row's sums never depend on the other rows
                            nullptr, &Avx512Bf16PackedBf16Kernels()};
  return ks;
}

const KernelSet& Avx512Kernels() {
  static const KernelSet ks{"avx512-f32", 16, 4, kFp8Unscale, &AcceptsF32, &PackF32, &GemmBlocks<float, F32Tile>,
                            &StreamF32Avx2, kStreamMaxMF32, &StreamABytesF32Avx2, &PrepareStreamAF32Avx2,
                            &Avx2PackedKernels(), &StreamInnerF32Avx2,
                            &ks};  // rows_as_one: the AVX2 stream's rows never depend on the other rows
  return ks;
}

}  // namespace vt::cpu::matmul
