// NEON BF16 matmul kernel set (ARMv8.2-A + BF16, run where getauxval reports BF16): fp8 and
// BF16 operands packed to BF16 and multiplied in BF16 pairs. Every e4m3fn value is a BF16
// value, so the packing is exact (unscale 1): the fp8 decode looks each code's 7-bit
// magnitude up in two 128-entry byte tables (TBL over the first 64, TBX over the rest; the
// BF16 value's high and low byte) and inserts the code's sign bit, NaN codes included (they
// become BF16 NaN).
// The prefill GEMM multiplies with BFMMLA (a 2x4 by 4x2 BF16 product added to a 2x2 f32
// matrix: two rows of a against two panel rows, 16 products per instruction, twice BFDOT's);
// the decode GEMV streams with BFDOT (one row of a against one weight row, 8 products), where
// BFMMLA would multiply a zero row for lack of a second row of a (bench/kernel_notes.md has
// the instruction counts of both). Both add each output's products two at a time (a pair's
// two products summed, then added to the f32 sum), flush BF16 denormal inputs to zero (no fp8
// value, >= 2^-9, or product of two, >= 2^-18, is near that range; BF16 operands that are
// denormal count as zero, as in the x86 vdpbf16ps set) and round to odd unless FEAT_EBF16
// is enabled: within DESIGN's bound, as BFDOT was (the op table checks it).
#include <arm_neon.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "vt/cpu/matmul/kernels.h"
#include "vt/cpu/matmul/local.h"

namespace vt::cpu::matmul {

namespace {

constexpr int kVec = 16;  // K padding of packed rows: one fp8 decode step
constexpr int kRowsA = 2;

// The BF16 bits of the e4m3fn magnitude m (0..127), from the format: normal codes
// (exponent field e >= 1) are (1 + mant/8)·2^(e-7), subnormals mant·2^-9, 0x7F NaN.
constexpr uint16_t Bf16OfMagnitude(int m) {
  const int e = m >> 3, mant = m & 7;
  if (m == 0x7F) return 0x7FC0;
  if (e > 0) return static_cast<uint16_t>(((e + 120) << 7) | (mant << 4));
  if (mant == 0) return 0;
  const int p = mant >= 4 ? 2 : mant >= 2 ? 1 : 0;  // mant = 2^p·(1 + f)
  return static_cast<uint16_t>(((p - 9 + 127) << 7) | ((mant - (1 << p)) << (7 - p)));
}

// Byte `hi` (1: high byte, 0: low byte) of the BF16 value of each magnitude.
constexpr std::array<uint8_t, 128> MagnitudeTable(int hi) {
  std::array<uint8_t, 128> t{};
  for (int m = 0; m < 128; ++m) t[m] = static_cast<uint8_t>(Bf16OfMagnitude(m) >> (8 * hi));
  return t;
}
constexpr std::array<uint8_t, 128> kHi = MagnitudeTable(1), kLo = MagnitudeTable(0);

// The tables in registers (8 of them), loaded once per call.
struct Fp8Lut {
  uint8x16x4_t hi0, hi1, lo0, lo1;
  Fp8Lut()
      : hi0(vld1q_u8_x4(kHi.data())), hi1(vld1q_u8_x4(kHi.data() + 64)), lo0(vld1q_u8_x4(kLo.data())),
        lo1(vld1q_u8_x4(kLo.data() + 64)) {}
  // 16 codes -> 16 BF16 values, codes 0..7 in w0 and 8..15 in w1.
  inline void operator()(uint8x16_t x, bfloat16x8_t& w0, bfloat16x8_t& w1) const {
    const uint8x16_t mag = vandq_u8(x, vdupq_n_u8(0x7F));
    const uint8x16_t upper = vsubq_u8(mag, vdupq_n_u8(64));  // out of TBX's range below 64
    uint8x16_t h = vqtbx4q_u8(vqtbl4q_u8(hi0, mag), hi1, upper);
    const uint8x16_t l = vqtbx4q_u8(vqtbl4q_u8(lo0, mag), lo1, upper);
    h = vbslq_u8(vdupq_n_u8(0x80), x, h);  // the code's sign
    w0 = vreinterpretq_bf16_u8(vzip1q_u8(l, h));
    w1 = vreinterpretq_bf16_u8(vzip2q_u8(l, h));
  }
};

bool Accepts(DType d) { return d == DType::kF8E4M3 || d == DType::kBF16; }

void Pack(DType dt, const void* src, int64_t src_ld, int64_t rows, int64_t k0, int64_t kc, void* dst, int64_t ld,
          int64_t kcp) {
  const Fp8Lut lut;
  for (int64_t r = 0; r < rows; ++r) {
    auto* d = static_cast<uint16_t*>(dst) + r * ld;
    const int64_t s = r * src_ld + k0;
    if (dt == DType::kF8E4M3) {
      const auto* p = static_cast<const uint8_t*>(src) + s;
      int64_t k = 0;
      bfloat16x8_t w0, w1;
      for (; k + 16 <= kc; k += 16) {
        lut(vld1q_u8(p + k), w0, w1);
        vst1q_bf16(reinterpret_cast<bfloat16_t*>(d + k), w0);
        vst1q_bf16(reinterpret_cast<bfloat16_t*>(d + k + 8), w1);
      }
      if (k < kcp) {  // kcp is a multiple of 16: one last step, zero-padded
        uint8_t tail[16] = {};
        std::memcpy(tail, p + k, static_cast<size_t>(kc - k));
        lut(vld1q_u8(tail), w0, w1);
        vst1q_bf16(reinterpret_cast<bfloat16_t*>(d + k), w0);
        vst1q_bf16(reinterpret_cast<bfloat16_t*>(d + k + 8), w1);
      }
    } else if (dt == DType::kBF16) {
      std::memcpy(d, static_cast<const uint16_t*>(src) + s, static_cast<size_t>(kc) * sizeof(uint16_t));
      for (int64_t k = kc; k < kcp; ++k) d[k] = 0;
    } else {
      ThrowUnsupportedPack("neonbf16", dt);
    }
  }
}

inline bfloat16x8_t LoadBf16(const uint16_t* p) { return vld1q_bf16(reinterpret_cast<const bfloat16_t*>(p)); }

// [sum a0, sum a1, sum a2, sum a3].
inline float32x4_t Hsum4(float32x4_t a0, float32x4_t a1, float32x4_t a2, float32x4_t a3) {
  return vpaddq_f32(vpaddq_f32(a0, a1), vpaddq_f32(a2, a3));
}

// ---- Prefill GEMM (BFMMLA) -------------------------------------------------------
// The panel rows in pairs: rows 2q and 2q + 1 share 2·ld elements, interleaved 4 K values at
// a time (row 2q's k..k+3, then row 2q + 1's), the operand layout of BFMMLA's 4x2 matrix; an
// odd last row is paired with zeros. a keeps the plain layout of `Pack` (the decode GEMV
// reads it too); its pairs of rows are interleaved in registers (ZIP1/ZIP2 of 64-bit lanes).

// 16 values of a row from element `off` of src (`valid` of them there, zeros after) as BF16.
inline void LoadStep(const Fp8Lut& lut, DType dt, const void* src, int64_t off, int64_t valid, bfloat16x8_t& w0,
                     bfloat16x8_t& w1) {
  if (dt == DType::kF8E4M3) {
    uint8_t tail[16] = {};
    const uint8_t* p = tail;
    if (valid >= 16)
      p = static_cast<const uint8_t*>(src) + off;
    else if (valid > 0)
      std::memcpy(tail, static_cast<const uint8_t*>(src) + off, static_cast<size_t>(valid));
    lut(vld1q_u8(p), w0, w1);
  } else {
    alignas(16) uint16_t tail[16] = {};
    const uint16_t* p = tail;
    if (valid >= 16)
      p = static_cast<const uint16_t*>(src) + off;
    else if (valid > 0)
      std::memcpy(tail, static_cast<const uint16_t*>(src) + off, static_cast<size_t>(valid) * sizeof(uint16_t));
    w0 = LoadBf16(p);
    w1 = LoadBf16(p + 8);
  }
}

inline bfloat16x8_t Lo64(bfloat16x8_t x, bfloat16x8_t y) {
  return vreinterpretq_bf16_u64(vzip1q_u64(vreinterpretq_u64_bf16(x), vreinterpretq_u64_bf16(y)));
}
inline bfloat16x8_t Hi64(bfloat16x8_t x, bfloat16x8_t y) {
  return vreinterpretq_bf16_u64(vzip2q_u64(vreinterpretq_u64_bf16(x), vreinterpretq_u64_bf16(y)));
}

void PackPanel(DType dt, const void* src, int64_t src_ld, int64_t rows, int64_t k0, int64_t kc, void* dst,
               int64_t ld, int64_t kcp) {
  if (!Accepts(dt)) ThrowUnsupportedPack("neonbf16 panel", dt);
  const Fp8Lut lut;
  const bfloat16x8_t zero = vreinterpretq_bf16_u16(vdupq_n_u16(0));
  for (int64_t r = 0; r < rows; r += 2) {
    auto* d = reinterpret_cast<bfloat16_t*>(static_cast<uint16_t*>(dst) + r * ld);
    for (int64_t k = 0; k < kcp; k += 16) {
      bfloat16x8_t x0, x1, y0 = zero, y1 = zero;
      LoadStep(lut, dt, src, r * src_ld + k0 + k, kc - k, x0, x1);
      if (r + 1 < rows) LoadStep(lut, dt, src, (r + 1) * src_ld + k0 + k, kc - k, y0, y1);
      vst1q_bf16(d + 2 * k, Lo64(x0, y0));
      vst1q_bf16(d + 2 * k + 8, Hi64(x0, y0));
      vst1q_bf16(d + 2 * k + 16, Lo64(x1, y1));
      vst1q_bf16(d + 2 * k + 24, Hi64(x1, y1));
    }
  }
}

// MR rows of a (MR even: pairs; 1: the row and a zero row) against kPanelRows panel rows
// (two pairs): acc[i][q] holds [c(2i, 2q), c(2i, 2q+1), c(2i+1, 2q), c(2i+1, 2q+1)]. Each
// output's sum sees the same operations whatever the other row of its pair is, so a row's
// sums do not depend on M.
template <int MR>
void MmlaTile(const uint16_t* a, int64_t lda, const uint16_t* p, int64_t ldp, int64_t kcp, float* c, int64_t ldc) {
  constexpr int kPairs = (MR + 1) / 2;
  float32x4_t acc[kPairs][2];
  Unroll<kPairs>([&](auto i) __attribute__((always_inline)) {
    Unroll<2>([&](auto q) __attribute__((always_inline)) { acc[i][q] = vdupq_n_f32(0.0f); });
  });
  const bfloat16x8_t zero = vreinterpretq_bf16_u16(vdupq_n_u16(0));
  for (int64_t k = 0; k < kcp; k += 8) {
    bfloat16x8_t b[2][2];
    Unroll<2>([&](auto q) __attribute__((always_inline)) {
      b[q][0] = LoadBf16(p + 2 * q * ldp + 2 * k);
      b[q][1] = LoadBf16(p + 2 * q * ldp + 2 * k + 8);
    });
    Unroll<kPairs>([&](auto i) __attribute__((always_inline)) {
      const bfloat16x8_t r0 = LoadBf16(a + 2 * i * lda + k);
      const bfloat16x8_t r1 = MR == 1 ? zero : LoadBf16(a + (2 * i + 1) * lda + k);
      const bfloat16x8_t lo = Lo64(r0, r1), hi = Hi64(r0, r1);
      Unroll<2>([&](auto q) __attribute__((always_inline)) {
        acc[i][q] = vbfmmlaq_f32(acc[i][q], lo, b[q][0]);
        acc[i][q] = vbfmmlaq_f32(acc[i][q], hi, b[q][1]);
      });
    });
  }
  Unroll<kPairs>([&](auto i) __attribute__((always_inline)) {
    const uint64x2_t s0 = vreinterpretq_u64_f32(acc[i][0]), s1 = vreinterpretq_u64_f32(acc[i][1]);
    float* c0 = c + 2 * i * ldc;
    vst1q_f32(c0, vaddq_f32(vld1q_f32(c0), vreinterpretq_f32_u64(vzip1q_u64(s0, s1))));
    if constexpr (MR > 1) {
      float* c1 = c0 + ldc;
      vst1q_f32(c1, vaddq_f32(vld1q_f32(c1), vreinterpretq_f32_u64(vzip2q_u64(s0, s1))));
    }
  });
}

// Rows of a in tiles of 8 (4 pairs: 8 accumulators, 4 panel and 2 row registers per step),
// then 2, then 1.
constexpr int kMmlaRows = 8;

void Gemm(const void* av, int64_t lda, int64_t M, const void* pv, int64_t ldp, int64_t nrows, int64_t kcp, float* c,
          int64_t ldc) {
  const auto* a = static_cast<const uint16_t*>(av);
  const auto* p = static_cast<const uint16_t*>(pv);
  for (int64_t m = 0; m < M;) {
    const int64_t left = M - m;
    const int mr = left >= kMmlaRows ? kMmlaRows : left >= 2 ? 2 : 1;
    for (int64_t n = 0; n < nrows; n += kPanelRows) {
      const uint16_t* pa = a + m * lda;
      const uint16_t* pp = p + n * ldp;
      float* pc = c + m * ldc + n;
      if (mr == kMmlaRows)
        MmlaTile<kMmlaRows>(pa, lda, pp, ldp, kcp, pc, ldc);
      else if (mr == 2)
        MmlaTile<2>(pa, lda, pp, ldp, kcp, pc, ldc);
      else
        MmlaTile<1>(pa, lda, pp, ldp, kcp, pc, ldc);
    }
    m += mr;
  }
}

// ---- Streaming decode (small M) -----------------------------------------------------

// One 16-value step of StreamTile: MR rows of a at ar[i], NR weight rows at br[j].
template <typename W, int MR, int NR, int kSums>
__attribute__((always_inline)) inline void StreamStep(const Fp8Lut& lut, const uint16_t* const* ar,
                                                      const W* const* br,
                                                      float32x4_t (&acc)[MR][kPanelRows][kSums]) {
  bfloat16x8_t a0[MR], a1[MR];
  Unroll<MR>([&](auto i) __attribute__((always_inline)) {
    a0[i] = LoadBf16(ar[i]);
    a1[i] = LoadBf16(ar[i] + 8);
  });
  Unroll<NR>([&](auto j) __attribute__((always_inline)) {
    bfloat16x8_t w0, w1;
    if constexpr (sizeof(W) == 1) {
      lut(vld1q_u8(br[j]), w0, w1);
    } else {
      w0 = LoadBf16(br[j]);
      w1 = LoadBf16(br[j] + 8);
    }
    Unroll<MR>([&](auto i) __attribute__((always_inline)) {
      acc[i][j][0] = vbfdotq_f32(acc[i][j][0], a0[i], w0);
      acc[i][j][kSums - 1] = vbfdotq_f32(acc[i][j][kSums - 1], a1[i], w1);
    });
  });
}

// NR weight rows (fp8 or BF16; length K, ldb elements apart) against MR packed BF16 rows of
// a: c[i * ldc + j * cs] = Σ_k a[i, k]·b[j, k]. 16 K values per step, two BFDOTs per pair
// of rows; the tail (K % 16) goes through zero-padded copies, so no load passes a row's end.
// The tables are copied into locals, so that they stay in registers (16 of the 32) instead of
// being loaded again for every weight row; one sum per pair of rows leaves room for them.
// Not inlined: bench/gemv_insn_count.py reads each tile's loop from its own symbol.
template <typename W, int MR, int NR>
__attribute__((noinline)) void StreamTile(const Fp8Lut& lut_in, const uint16_t* a, int64_t lda, const W* b,
                                          int64_t ldb, int64_t K, float* c, int64_t ldc, int64_t cs) {
  constexpr int64_t kElt = sizeof(W);
  constexpr int kSums = 1;
  const Fp8Lut lut = lut_in;
  float32x4_t acc[MR][kPanelRows][kSums];
  Unroll<MR>([&](auto i) __attribute__((always_inline)) {
    Unroll<kPanelRows>([&](auto j) __attribute__((always_inline)) {
      Unroll<kSums>([&](auto s) __attribute__((always_inline)) { acc[i][j][s] = vdupq_n_f32(0.0f); });
    });
  });
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const uint16_t* ar[MR];
    const W* br[NR];
    for (int i = 0; i < MR; ++i) ar[i] = a + i * lda + k;
    for (int j = 0; j < NR; ++j) {
      br[j] = b + j * ldb + k;
      if ((k * kElt) % 64 == 0)
        __builtin_prefetch(reinterpret_cast<const char*>(br[j]) + PrefetchAhead(k, ldb, K, NR, kElt));
    }
    StreamStep<W, MR, NR, kSums>(lut, ar, br, acc);
  }
  if (k < K) {
    alignas(16) W bt[NR][16] = {};
    const uint16_t* ar[MR];
    const W* br[NR];
    for (int i = 0; i < MR; ++i) ar[i] = a + i * lda + k;  // a's rows are padded to 16
    for (int j = 0; j < NR; ++j) {
      std::memcpy(bt[j], b + j * ldb + k, static_cast<size_t>(K - k) * kElt);
      br[j] = bt[j];
    }
    StreamStep<W, MR, NR, kSums>(lut, ar, br, acc);
  }
  Unroll<MR>([&](auto i) __attribute__((always_inline)) {
    float32x4_t s[kPanelRows];
    Unroll<kPanelRows>([&](auto j) __attribute__((always_inline)) {
      s[j] = kSums == 2 ? vaddq_f32(acc[i][j][0], acc[i][j][kSums - 1]) : acc[i][j][0];
    });
    alignas(16) float v[4];
    vst1q_f32(v, Hsum4(s[0], s[1], s[2], s[3]));
    for (int j = 0; j < NR; ++j) c[i * ldc + j * cs] = v[j];
  });
}

template <typename W, int NR>
void StreamGroup(const Fp8Lut& lut, const uint16_t* a, int64_t lda, int64_t M, const W* b, int64_t ldb, int64_t K,
                 float* c, int64_t ldc, int64_t cs) {
  for (int64_t m = 0; m < M; m += kRowsA) {
    if (M - m >= kRowsA)
      StreamTile<W, kRowsA, NR>(lut, a + m * lda, lda, b, ldb, K, c + m * ldc, ldc, cs);
    else
      StreamTile<W, 1, NR>(lut, a + m * lda, lda, b, ldb, K, c + m * ldc, ldc, cs);
  }
}

template <typename W>
void StreamAll(const uint16_t* a, int64_t lda, int64_t M, const W* b, int64_t K, int64_t nrows, float* c,
               int64_t ldc) {
  const Fp8Lut lut;
  const StreamGroups gs = GroupsFor(M, nrows);
  for (int64_t g = 0; g < gs.groups; ++g)
    StreamGroup<W, kPanelRows>(lut, a, lda, M, b + g * gs.first * K, gs.stride * K, K, c + g * gs.first, ldc,
                               gs.stride);
  for (int64_t n = kPanelRows * gs.groups; n < nrows; ++n)
    StreamGroup<W, 1>(lut, a, lda, M, b + n * K, K, K, c + n, ldc, 1);
}

void Stream(DType dt, const void* av, int64_t lda, int64_t M, const void* b, int64_t K, int64_t nrows, float* c,
            int64_t ldc) {
  const auto* a = static_cast<const uint16_t*>(av);
  if (dt == DType::kF8E4M3)
    StreamAll(a, lda, M, static_cast<const uint8_t*>(b), K, nrows, c, ldc);
  else if (dt == DType::kBF16)
    StreamAll(a, lda, M, static_cast<const uint16_t*>(b), K, nrows, c, ldc);
  else
    ThrowUnsupportedPack("neonbf16 stream", dt);
}

}  // namespace

const KernelSet& NeonBf16Kernels() {
  static const KernelSet ks = [] {
    KernelSet k{"neonbf16-bfmmla", kVec, 2, 1.0f, &Accepts, &Pack, &Gemm, &Stream, kStreamMaxMF32};
    k.pack_panel = &PackPanel;
    k.rows_as_one = &ks;  // one sum per weight row for every tile height: rows never depend on M
    return k;
  }();
  return ks;
}

}  // namespace vt::cpu::matmul
