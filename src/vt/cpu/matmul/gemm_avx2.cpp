// AVX2 matmul kernel set (compiled with AVX2/FMA/F16C): operands packed to F32 and
// multiplied with FMA on 8 lanes. fp8 is decoded with the half trick described in
// matmul/gemm_avx512.cpp (sign-extend, shift left by 7, clear bit 14: value * 2^-8 as an IEEE
// half), then vcvtph2ps; the driver multiplies by 2^8 per fp8 operand. Small M streams
// the weight rows straight into the FMAs (decoded in registers, no panel), on AMD
// processors with the f32-bits decode (Fp8StreamDecode in matmul/kernels.h).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "vt/cpu/matmul/fp8_decode_avx2.h"
#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/local.h"

namespace vt::cpu::matmul {

namespace {

constexpr int kLanes = 8;
constexpr int kRowsA = 2;
constexpr int64_t kPrefetchBytes = 1024;

// 8 fp8 codes (low 8 bytes of x) -> 8 f32 equal to value * 2^-8; NaN codes stay NaN.
inline __m256 Fp8ToF32x8(__m128i x) {
  const __m128i s = _mm_cvtepi8_epi16(x);
  const __m128i h = _mm_and_si128(_mm_slli_epi16(s, 7), _mm_set1_epi16(static_cast<int16_t>(0xBF80)));
  const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7FFF)), _mm_set1_epi16(0x3F80));
  return _mm256_cvtph_ps(_mm_blendv_epi8(h, _mm_set1_epi16(0x7E00), nan));
}

bool Accepts(DType d) { return d == DType::kF8E4M3 || d == DType::kBF16 || d == DType::kF32; }

void Pack(DType dt, const void* src, int64_t src_ld, int64_t rows, int64_t k0, int64_t kc, void* dst, int64_t ld,
          int64_t kcp) {
  const int64_t kfull = kc / kLanes * kLanes;
  for (int64_t r = 0; r < rows; ++r) {
    float* d = static_cast<float*>(dst) + r * ld;
    const int64_t s = r * src_ld + k0;
    if (dt == DType::kF8E4M3) {
      const auto* p = static_cast<const uint8_t*>(src) + s;
      for (int64_t k = 0; k < kfull; k += kLanes) {
        if (k + kPrefetchBytes < kc) _mm_prefetch(reinterpret_cast<const char*>(p + k + kPrefetchBytes), _MM_HINT_T0);
        _mm256_storeu_ps(d + k, Fp8ToF32x8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + k))));
      }
      if (kfull < kcp) {
        uint8_t tail[kLanes] = {};
        std::memcpy(tail, p + kfull, static_cast<size_t>(kc - kfull));
        _mm256_storeu_ps(d + kfull, Fp8ToF32x8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tail))));
      }
    } else if (dt == DType::kBF16) {
      const auto* p = static_cast<const uint16_t*>(src) + s;
      auto widen = [](__m128i w) { return _mm256_slli_epi32(_mm256_cvtepu16_epi32(w), 16); };
      for (int64_t k = 0; k < kfull; k += kLanes)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k),
                            widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k))));
      if (kfull < kcp) {
        uint16_t tail[kLanes] = {};
        std::memcpy(tail, p + kfull, static_cast<size_t>(kc - kfull) * sizeof(uint16_t));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + kfull),
                            widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tail))));
      }
    } else if (dt == DType::kF32) {
      std::memcpy(d, static_cast<const float*>(src) + s, static_cast<size_t>(kc) * sizeof(float));
      for (int64_t k = kc; k < kcp; ++k) d[k] = 0.0f;
    } else {
      ThrowUnsupportedPack("avx2", dt);
    }
  }
}

// Sums of the 8 lanes of each of a0..a3.
inline __m128 Hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

template <int MR>
void Tile(const float* a, int64_t lda, const float* p, int64_t ldp, int64_t kcp, float* c, int64_t ldc) {
  __m256 acc[MR][kPanelRows];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kPanelRows; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kcp; k += kLanes) {
    __m256 av[MR];
    for (int i = 0; i < MR; ++i) av[i] = _mm256_loadu_ps(a + i * lda + k);
    for (int j = 0; j < kPanelRows; ++j) {
      const __m256 bv = _mm256_loadu_ps(p + j * ldp + k);
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(av[i], bv, acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    const __m128 s = Hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    _mm_storeu_ps(c + i * ldc, _mm_add_ps(_mm_loadu_ps(c + i * ldc), s));
  }
}

// Rows of a in tiles of 3 (12 accumulators: enough to cover the FMA latency, and with the
// 3 rows of a and one panel row in registers all 16 of them), or of 2 where M is not a
// multiple of 3 (16 rows: 2, 2, 3, 3, 3, 3; a tile of 1 row would hold 4 accumulators);
// every panel row against one tile of a before the next tile, so a's rows stay in L1.
// Each (row, panel row) sum is its own accumulator and Hsum4 tree whatever the tile, so a
// row's bytes do not depend on M.
void Gemm(const void* av, int64_t lda, int64_t M, const void* pv, int64_t ldp, int64_t nrows, int64_t kcp, float* c,
          int64_t ldc) {
  const auto* a = static_cast<const float*>(av);
  const auto* p = static_cast<const float*>(pv);
  const int64_t tiles = (M + 2) / 3;
  for (int64_t t = 0, m = 0; t < tiles; ++t) {
    const int64_t mr = (M - m) / (tiles - t);
    auto* tile = mr == 3 ? &Tile<3> : mr == 2 ? &Tile<2> : &Tile<1>;
    for (int64_t n = 0; n < nrows; n += kPanelRows) tile(a + m * lda, lda, p + n * ldp, ldp, kcp, c + m * ldc + n, ldc);
    m += mr;
  }
}

// ---- Streaming decode (small M) -----------------------------------------------------

std::atomic<int> g_decode{static_cast<int>(Fp8StreamDecode::kAuto)};

// Whether the stream decodes these weights as kF32Bits (and so reads prepared rows of a).
bool UseF32Bits(DType b_dtype) {
  if (b_dtype != DType::kF8E4M3) return false;
  switch (static_cast<Fp8StreamDecode>(g_decode.load(std::memory_order_relaxed))) {
    case Fp8StreamDecode::kHalf: return false;
    case Fp8StreamDecode::kF32Bits: return true;
    case Fp8StreamDecode::kAuto: break;
  }
  static const bool amd = __builtin_cpu_is("amd");
  return amd;
}

// 16 BF16 values at p -> 16 f32 in w0, w1.
inline void Bf16ToF32x16(const uint16_t* p, __m256& w0, __m256& w1) {
  auto widen = [](__m128i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(w), 16)); };
  w0 = widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  w1 = widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
}

// NR weight rows (fp8, BF16 or F32; length K, ldb elements apart) against MR packed rows
// of a: c[i * ldc + j * cs] = Σ_k a[i, k]·b[j, k]. 16 K values per step; the tail (K % 16)
// goes through zero-padded copies, so no load passes a row's end or a's padding. fp8 rows
// run first without the NaN fix-up of the decode, keeping the largest code magnitude
// seen (two instructions per 16 codes instead of four); if that is the NaN magnitude
// (rare: checkpoints hold no NaN weights) the tile runs again with it. kBits: fp8 decoded
// as kF32Bits against prepared rows of a (each step's 8 even K values, then the 8 odd).
template <typename W, int MR, int NR, bool kBits = false>
void StreamTile(const float* a, int64_t lda, const W* b, int64_t ldb, int64_t K, float* c, int64_t ldc,
                int64_t cs) {
  constexpr int64_t kElt = sizeof(W);
  __m256 acc[MR][kPanelRows];
  __m128i seen = _mm_setzero_si128();  // per byte, the largest code & 0x7F seen (fp8)
  auto step = [&]<bool kNaN>(const float* const* ar, const W* const* br) __attribute__((always_inline)) {
    __m256 a0[MR], a1[MR];
    for (int i = 0; i < MR; ++i) {
      a0[i] = _mm256_loadu_ps(ar[i]);
      a1[i] = _mm256_loadu_ps(ar[i] + 8);
    }
    for (int j = 0; j < NR; ++j) {
      __m256 w0, w1;
      if constexpr (kElt == 1) {
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(br[j]));
        if constexpr (!kNaN) seen = _mm_max_epu8(seen, _mm_and_si128(x, _mm_set1_epi8(0x7F)));
        if constexpr (kBits)
          Fp8ToF32BitsX16<kNaN>(x, w0, w1);
        else
          Fp8ToF32x16<kNaN>(x, w0, w1);
      } else if constexpr (kElt == 2) {
        Bf16ToF32x16(br[j], w0, w1);
      } else {
        w0 = _mm256_loadu_ps(br[j]);
        w1 = _mm256_loadu_ps(br[j] + 8);
      }
      for (int i = 0; i < MR; ++i) {
        acc[i][j] = _mm256_fmadd_ps(a0[i], w0, acc[i][j]);
        acc[i][j] = _mm256_fmadd_ps(a1[i], w1, acc[i][j]);
      }
    }
  };
  auto run = [&]<bool kNaN>() __attribute__((always_inline)) {
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < kPanelRows; ++j) acc[i][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      const float* ar[MR];
      const W* br[NR];
      for (int i = 0; i < MR; ++i) ar[i] = a + i * lda + k;
      for (int j = 0; j < NR; ++j) {
        br[j] = b + j * ldb + k;
        // One prefetch per 64-byte line of each row's stream.
        if ((k * kElt) % 64 == 0)
          _mm_prefetch(reinterpret_cast<const char*>(br[j]) + PrefetchAhead(k, ldb, K, NR, kElt), _MM_HINT_T0);
      }
      step.template operator()<kNaN>(ar, br);
    }
    if (k < K) {
      alignas(32) float at[MR][16] = {};
      alignas(32) W bt[NR][16] = {};
      const float* ar[MR];
      const W* br[NR];
      const int64_t left = K - k, a_left = std::min<int64_t>(16, lda - k);
      for (int i = 0; i < MR; ++i) {
        std::memcpy(at[i], a + i * lda + k, static_cast<size_t>(a_left) * sizeof(float));
        ar[i] = at[i];
      }
      for (int j = 0; j < NR; ++j) {
        std::memcpy(bt[j], b + j * ldb + k, static_cast<size_t>(left) * kElt);
        br[j] = bt[j];
      }
      step.template operator()<kNaN>(ar, br);
    }
  };
  run.template operator()<false>();
  if constexpr (kElt == 1) {
    if (_mm_movemask_epi8(_mm_cmpeq_epi8(seen, _mm_set1_epi8(0x7F))) != 0) run.template operator()<true>();
  }
  for (int i = 0; i < MR; ++i) {
    const __m128 s = Hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
    alignas(16) float v[4];
    _mm_store_ps(v, s);
    for (int j = 0; j < NR; ++j) c[i * ldc + j * cs] = v[j];
  }
}

// The group against all M rows of a, in pairs: the group's rows stay in L1 after the first.
template <typename W, int NR, bool kBits>
void StreamGroup(const float* a, int64_t lda, int64_t M, const W* b, int64_t ldb, int64_t K, float* c, int64_t ldc,
                 int64_t cs) {
  for (int64_t m = 0; m < M; m += kRowsA) {
    if (M - m >= kRowsA)
      StreamTile<W, kRowsA, NR, kBits>(a + m * lda, lda, b, ldb, K, c + m * ldc, ldc, cs);
    else
      StreamTile<W, 1, NR, kBits>(a + m * lda, lda, b, ldb, K, c + m * ldc, ldc, cs);
  }
}

// c[m * ldc + n] = Σ_k a[m, k]·b[n, k] for m < M, n < nrows; a packed as by Pack (F32,
// zero from K to lda; with kBits prepared by PrepareStreamAF32Avx2), b the raw [nrows, K]
// weight rows; groups laid out as matmul/local.h describes.
template <typename W, bool kBits = false>
void StreamAll(const float* a, int64_t lda, int64_t M, const W* b, int64_t K, int64_t nrows, float* c,
               int64_t ldc) {
  const StreamGroups gs = GroupsFor(M, nrows);
  for (int64_t g = 0; g < gs.groups; ++g)
    StreamGroup<W, kPanelRows, kBits>(a, lda, M, b + g * gs.first * K, gs.stride * K, K, c + g * gs.first, ldc,
                                      gs.stride);
  for (int64_t n = kPanelRows * gs.groups; n < nrows; ++n)
    StreamGroup<W, 1, kBits>(a, lda, M, b + n * K, K, K, c + n, ldc, 1);
}

}  // namespace

void SetFp8StreamDecode(Fp8StreamDecode decode) { g_decode.store(static_cast<int>(decode)); }

bool Fp8DecodeAsF32Bits() { return UseF32Bits(DType::kF8E4M3); }

size_t StreamABytesF32Avx2(DType b_dtype, int64_t lda, int64_t M) {
  return UseF32Bits(b_dtype) ? static_cast<size_t>(M * F32BitsLda(lda)) * sizeof(float) : 0;
}

void PrepareStreamAF32Avx2(const void* av, int64_t lda, int64_t M, int64_t block0, int64_t block1, void* dst) {
  const auto* a = static_cast<const float*>(av);
  auto* d = static_cast<float*>(dst);
  const int64_t ldp = F32BitsLda(lda), m1 = std::min(M, block1 * kStreamABlockRows);
  for (int64_t m = block0 * kStreamABlockRows; m < m1; ++m)
    for (int64_t k = 0; k < ldp; k += 16)
      for (int64_t j = 0; j < 16; ++j)
        d[m * ldp + k + (j % 2) * 8 + j / 2] = k + j < lda ? a[m * lda + k + j] * kF32BitsAScale : 0.0f;
}

void StreamF32Avx2(DType dt, const void* a, int64_t lda, int64_t M, const void* b, int64_t K, int64_t nrows,
                   float* c, int64_t ldc) {
  const auto* af = static_cast<const float*>(a);
  if (UseF32Bits(dt)) {
    // IEEE arithmetic whatever the caller's MXCSR: with denormals-are-zero set, the
    // subnormal weights would count as 0 (the half trick never makes subnormal floats).
    const unsigned csr = _mm_getcsr();
    constexpr unsigned kDazFtz = 0x8040;
    if ((csr & kDazFtz) != 0) _mm_setcsr(csr & ~kDazFtz);
    StreamAll<uint8_t, true>(af, F32BitsLda(lda), M, static_cast<const uint8_t*>(b), K, nrows, c, ldc);
    if ((csr & kDazFtz) != 0) _mm_setcsr(csr);
  } else if (dt == DType::kF8E4M3)
    StreamAll(af, lda, M, static_cast<const uint8_t*>(b), K, nrows, c, ldc);
  else if (dt == DType::kBF16)
    StreamAll(af, lda, M, static_cast<const uint16_t*>(b), K, nrows, c, ldc);
  else if (dt == DType::kF32)
    StreamAll(af, lda, M, static_cast<const float*>(b), K, nrows, c, ldc);
  else
    ThrowUnsupportedPack("avx2 stream", dt);
}

Inner StreamInnerF32Avx2(DType b_dtype, int64_t) { return UseF32Bits(b_dtype) ? Inner::kF32Bits : Inner::kPlain; }

const KernelSet& Avx2Kernels() {
  static const KernelSet ks{"avx2-f32",           kLanes,           4, 256.0f, &Accepts, &Pack, &Gemm,
                            &StreamF32Avx2,       kStreamMaxMF32,   &StreamABytesF32Avx2,
                            &PrepareStreamAF32Avx2, &Avx2PackedKernels(), &StreamInnerF32Avx2,
                            &ks};  // rows_as_one: a row's sums never depend on the other rows
  return ks;
}

}  // namespace vt::cpu::matmul
