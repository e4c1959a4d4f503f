// NEON matmul kernel set (ARMv8.0-A Advanced SIMD): operands packed to F32 and multiplied
// with FMLA on 4 lanes. fp8 is decoded with the half trick of matmul/gemm_avx512.cpp
// (sign-extend to 16 bits, shift left by 7, clear bit 14: value * 2^-8 as an IEEE half,
// subnormals included), then widened by FCVTL; the driver multiplies by 2^8 per fp8
// operand. Small M streams the weight rows straight into the FMLAs (decoded in registers,
// no panel), in the group layouts of matmul/local.h.
#include <arm_neon.h>

#include <algorithm>
#include <cstring>

#include "vt/cpu/matmul/fp8_decode_neon.h"
#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/local.h"

namespace vt::cpu::matmul {

namespace {

constexpr int kVec = 8;  // K padding of packed rows: two 4-lane vectors per step
constexpr int kRowsA = 2;

// 16 fp8 codes -> 16 f32 (value * 2^-8) in w[0..3] (Fp8ToHalf16, fp8_decode_neon.h); with
// kNaN the NaN codes become NaN (unsigned: a matmul sum holding one is NaN whatever its sign).
template <bool kNaN>
inline void Fp8ToF32x16(uint8x16_t x, float32x4_t (&w)[4]) {
  uint16x8_t h0, h1;
  Fp8ToHalf16(x, h0, h1);
  if constexpr (kNaN) {
    const uint16x8_t mag = vdupq_n_u16(0x7FFF), nan_mag = vdupq_n_u16(0x3F80), qnan = vdupq_n_u16(0x7E00);
    h0 = vbslq_u16(vceqq_u16(vandq_u16(h0, mag), nan_mag), qnan, h0);
    h1 = vbslq_u16(vceqq_u16(vandq_u16(h1, mag), nan_mag), qnan, h1);
  }
  w[0] = HalfLo(h0);
  w[1] = HalfHi(h0);
  w[2] = HalfLo(h1);
  w[3] = HalfHi(h1);
}

// Twice each code's magnitude, kept as a per-byte maximum: 0xFE once a NaN code was met.
inline uint8x16_t NanSeen(uint8x16_t seen, uint8x16_t x) { return vmaxq_u8(seen, vshlq_n_u8(x, 1)); }
inline bool SawNan(uint8x16_t seen) { return vmaxvq_u8(seen) == 0xFE; }

inline float32x4_t Bf16Lo(uint16x8_t v) { return vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(v), 16)); }
inline float32x4_t Bf16Hi(uint16x8_t v) { return vreinterpretq_f32_u32(vshll_high_n_u16(v, 16)); }

bool Accepts(DType d) { return d == DType::kF8E4M3 || d == DType::kBF16 || d == DType::kF32; }

void Pack(DType dt, const void* src, int64_t src_ld, int64_t rows, int64_t k0, int64_t kc, void* dst, int64_t ld,
          int64_t kcp) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = static_cast<float*>(dst) + r * ld;
    const int64_t s = r * src_ld + k0;
    if (dt == DType::kF8E4M3) {
      const auto* p = static_cast<const uint8_t*>(src) + s;
      int64_t k = 0;
      for (; k + 16 <= kc; k += 16) {
        float32x4_t w[4];
        Fp8ToF32x16<true>(vld1q_u8(p + k), w);
        for (int j = 0; j < 4; ++j) vst1q_f32(d + k + 4 * j, w[j]);
      }
      if (k < kcp) {  // kcp - k <= 16 (kcp rounds kc up to a multiple of 8)
        uint8_t tail[16] = {};
        std::memcpy(tail, p + k, static_cast<size_t>(kc - k));
        float32x4_t w[4];
        Fp8ToF32x16<true>(vld1q_u8(tail), w);
        float out[16];
        for (int j = 0; j < 4; ++j) vst1q_f32(out + 4 * j, w[j]);
        std::memcpy(d + k, out, static_cast<size_t>(kcp - k) * sizeof(float));
      }
    } else if (dt == DType::kBF16) {
      const auto* p = static_cast<const uint16_t*>(src) + s;
      int64_t k = 0;
      for (; k + 8 <= kc; k += 8) {
        const uint16x8_t v = vld1q_u16(p + k);
        vst1q_f32(d + k, Bf16Lo(v));
        vst1q_f32(d + k + 4, Bf16Hi(v));
      }
      for (; k < kc; ++k) {
        const uint32_t u = static_cast<uint32_t>(p[k]) << 16;
        std::memcpy(d + k, &u, sizeof u);
      }
      for (; k < kcp; ++k) d[k] = 0.0f;
    } else if (dt == DType::kF32) {
      std::memcpy(d, static_cast<const float*>(src) + s, static_cast<size_t>(kc) * sizeof(float));
      for (int64_t k = kc; k < kcp; ++k) d[k] = 0.0f;
    } else {
      ThrowUnsupportedPack("neon", dt);
    }
  }
}

// [sum a0, sum a1, sum a2, sum a3].
inline float32x4_t Hsum4(float32x4_t a0, float32x4_t a1, float32x4_t a2, float32x4_t a3) {
  return vpaddq_f32(vpaddq_f32(a0, a1), vpaddq_f32(a2, a3));
}

template <int MR>
void Tile(const float* a, int64_t lda, const float* p, int64_t ldp, int64_t kcp, float* c, int64_t ldc) {
  float32x4_t acc[MR][kPanelRows];
  Unroll<MR>([&](auto i) __attribute__((always_inline)) {
    Unroll<kPanelRows>([&](auto j) __attribute__((always_inline)) { acc[i][j] = vdupq_n_f32(0.0f); });
  });
  for (int64_t k = 0; k < kcp; k += kVec) {
    float32x4_t b0[kPanelRows], b1[kPanelRows];
    for (int j = 0; j < kPanelRows; ++j) {
      b0[j] = vld1q_f32(p + j * ldp + k);
      b1[j] = vld1q_f32(p + j * ldp + k + 4);
    }
    Unroll<MR>([&](auto i) __attribute__((always_inline)) {
      const float32x4_t a0 = vld1q_f32(a + i * lda + k), a1 = vld1q_f32(a + i * lda + k + 4);
      Unroll<kPanelRows>([&](auto j) __attribute__((always_inline)) {
        acc[i][j] = vfmaq_f32(acc[i][j], a0, b0[j]);
        acc[i][j] = vfmaq_f32(acc[i][j], a1, b1[j]);
      });
    });
  }
  for (int i = 0; i < MR; ++i)
    vst1q_f32(c + i * ldc, vaddq_f32(vld1q_f32(c + i * ldc), Hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3])));
}

void Gemm(const void* av, int64_t lda, int64_t M, const void* pv, int64_t ldp, int64_t nrows, int64_t kcp, float* c,
          int64_t ldc) {
  const auto* a = static_cast<const float*>(av);
  const auto* p = static_cast<const float*>(pv);
  ForEachTile<kRowsA>(M, nrows, [&](auto rows, int64_t m, int64_t n) {
    Tile<decltype(rows)::value>(a + m * lda, lda, p + n * ldp, ldp, kcp, c + m * ldc + n, ldc);
  });
}

// ---- Streaming decode (small M) -----------------------------------------------------

// One 16-value step of StreamPass: MR rows of a at ar[i], NR weight rows at br[j].
template <typename W, int MR, int NR, int kSums, bool kNaN>
__attribute__((always_inline)) inline void StreamStep(const float* const* ar, const W* const* br,
                                                      float32x4_t (&acc)[MR][kPanelRows][kSums], uint8x16_t& seen) {
  constexpr int64_t kElt = sizeof(W);
  float32x4_t av[MR][4];
  for (int i = 0; i < MR; ++i)
    for (int q = 0; q < 4; ++q) av[i][q] = vld1q_f32(ar[i] + 4 * q);
  Unroll<NR>([&](auto j) __attribute__((always_inline)) {
    float32x4_t w[4];
    if constexpr (kElt == 1) {
      const uint8x16_t x = vld1q_u8(br[j]);
      if constexpr (!kNaN) seen = NanSeen(seen, x);
      Fp8ToF32x16<kNaN>(x, w);
    } else if constexpr (kElt == 2) {
      const uint16x8_t v0 = vld1q_u16(br[j]), v1 = vld1q_u16(br[j] + 8);
      w[0] = Bf16Lo(v0);
      w[1] = Bf16Hi(v0);
      w[2] = Bf16Lo(v1);
      w[3] = Bf16Hi(v1);
    } else {
      for (int q = 0; q < 4; ++q) w[q] = vld1q_f32(br[j] + 4 * q);
    }
    Unroll<MR>([&](auto i) __attribute__((always_inline)) {
      Unroll<4>([&](auto q) __attribute__((always_inline)) {
        acc[i][j][q % kSums] = vfmaq_f32(acc[i][j][q % kSums], av[i][q], w[q]);
      });
    });
  });
}

// NR weight rows (fp8, BF16 or F32; length K, ldb elements apart) against MR packed rows
// of a: sums[i] = [Σ_k a[i, k]·b[j, k] for j < 4] (rows past NR: 0). 16 K values per step;
// the tail (K % 16) goes through zero-padded copies, so no load passes a row's end or a's
// padding. One row of a keeps two sums per weight row (even and odd vectors of a step), so
// that its FMLA chains overlap. Without kNaN the decode leaves NaN codes finite and `seen`
// collects what StreamTile needs to notice them.
template <typename W, int MR, int NR, bool kNaN>
__attribute__((always_inline)) inline void StreamPass(const float* a, int64_t lda, const W* b, int64_t ldb, int64_t K,
                                                      uint8x16_t& seen, float32x4_t (&sums)[MR]) {
  constexpr int64_t kElt = sizeof(W);
  constexpr int kSums = MR == 1 ? 2 : 1;
  float32x4_t acc[MR][kPanelRows][kSums];
  Unroll<MR>([&](auto i) __attribute__((always_inline)) {
    Unroll<kPanelRows>([&](auto j) __attribute__((always_inline)) {
      Unroll<kSums>([&](auto s) __attribute__((always_inline)) { acc[i][j][s] = vdupq_n_f32(0.0f); });
    });
  });
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const float* ar[MR];
    const W* br[NR];
    for (int i = 0; i < MR; ++i) ar[i] = a + i * lda + k;
    for (int j = 0; j < NR; ++j) {
      br[j] = b + j * ldb + k;
      // One prefetch per 64-byte line of each row's stream.
      if ((k * kElt) % 64 == 0)
        __builtin_prefetch(reinterpret_cast<const char*>(br[j]) + PrefetchAhead(k, ldb, K, NR, kElt));
    }
    StreamStep<W, MR, NR, kSums, kNaN>(ar, br, acc, seen);
  }
  if (k < K) {
    alignas(16) float at[MR][16] = {};
    alignas(16) W bt[NR][16] = {};
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
    StreamStep<W, MR, NR, kSums, kNaN>(ar, br, acc, seen);
  }
  Unroll<MR>([&](auto i) __attribute__((always_inline)) {
    float32x4_t s[kPanelRows];
    Unroll<kPanelRows>([&](auto j) __attribute__((always_inline)) {
      s[j] = kSums == 2 ? vaddq_f32(acc[i][j][0], acc[i][j][kSums - 1]) : acc[i][j][0];
    });
    sums[i] = Hsum4(s[0], s[1], s[2], s[3]);
  });
}

// c[i * ldc + j * cs] = Σ_k a[i, k]·b[j, k] for i < MR, j < NR. fp8 rows run first without
// the NaN fix-up of the decode, keeping the largest code magnitude seen; if a NaN code was
// among them the pass runs again with it.
template <typename W, int MR, int NR>
void StreamTile(const float* a, int64_t lda, const W* b, int64_t ldb, int64_t K, float* c, int64_t ldc,
                int64_t cs) {
  uint8x16_t seen = vdupq_n_u8(0);
  float32x4_t sums[MR];
  StreamPass<W, MR, NR, false>(a, lda, b, ldb, K, seen, sums);
  if constexpr (sizeof(W) == 1) {
    if (SawNan(seen)) StreamPass<W, MR, NR, true>(a, lda, b, ldb, K, seen, sums);
  }
  for (int i = 0; i < MR; ++i) {
    alignas(16) float v[4];
    vst1q_f32(v, sums[i]);
    for (int j = 0; j < NR; ++j) c[i * ldc + j * cs] = v[j];
  }
}

// The group against all M rows of a, in pairs (kOneRow: one at a time, so that every row
// sums as it does alone): the group's rows stay in L1 after the first.
template <typename W, int NR, bool kOneRow>
void StreamGroup(const float* a, int64_t lda, int64_t M, const W* b, int64_t ldb, int64_t K, float* c, int64_t ldc,
                 int64_t cs) {
  for (int64_t m = 0; m < M; m += kOneRow ? 1 : kRowsA) {
    if (!kOneRow && M - m >= kRowsA)
      StreamTile<W, kRowsA, NR>(a + m * lda, lda, b, ldb, K, c + m * ldc, ldc, cs);
    else
      StreamTile<W, 1, NR>(a + m * lda, lda, b, ldb, K, c + m * ldc, ldc, cs);
  }
}

// c[m * ldc + n] = Σ_k a[m, k]·b[n, k] for m < M, n < nrows; a packed as by Pack, b the raw
// [nrows, K] weight rows; groups laid out as matmul/local.h describes.
template <typename W, bool kOneRow>
void StreamAll(const float* a, int64_t lda, int64_t M, const W* b, int64_t K, int64_t nrows, float* c, int64_t ldc) {
  const StreamGroups gs = GroupsFor(M, nrows);
  for (int64_t g = 0; g < gs.groups; ++g)
    StreamGroup<W, kPanelRows, kOneRow>(a, lda, M, b + g * gs.first * K, gs.stride * K, K, c + g * gs.first, ldc,
                                        gs.stride);
  for (int64_t n = kPanelRows * gs.groups; n < nrows; ++n)
    StreamGroup<W, 1, kOneRow>(a, lda, M, b + n * K, K, K, c + n, ldc, 1);
}

template <bool kOneRow>
void Stream(DType dt, const void* av, int64_t lda, int64_t M, const void* b, int64_t K, int64_t nrows, float* c,
            int64_t ldc) {
  const auto* a = static_cast<const float*>(av);
  if (dt == DType::kF8E4M3)
    StreamAll<uint8_t, kOneRow>(a, lda, M, static_cast<const uint8_t*>(b), K, nrows, c, ldc);
  else if (dt == DType::kBF16)
    StreamAll<uint16_t, kOneRow>(a, lda, M, static_cast<const uint16_t*>(b), K, nrows, c, ldc);
  else if (dt == DType::kF32)
    StreamAll<float, kOneRow>(a, lda, M, static_cast<const float*>(b), K, nrows, c, ldc);
  else
    ThrowUnsupportedPack("neon stream", dt);
}

}  // namespace

const KernelSet& NeonKernels() {
  // rows_as_one: one row keeps two sums per weight row and a pair of rows one, so rows that
  // must sum as they do alone stream one at a time against each group of weight rows.
  static const KernelSet rows{"neon-f32-rows", kVec, 4, 256.0f, &Accepts, &Pack, &Gemm, &Stream<true>, 1};
  static const KernelSet ks = [] {
    KernelSet k{"neon-f32", kVec, 4, 256.0f, &Accepts, &Pack, &Gemm, &Stream<false>, kStreamMaxMF32};
    k.rows_as_one = &rows;
    return k;
  }();
  return ks;
}

}  // namespace vt::cpu::matmul
