// MatmulFp8GroupScaled against a float64 reference of the same fp8 values and scales, on
// every CPU ISA level: |out - ref| <= 4·K·FLT_EPSILON·Σ_k|a·b·s_a·s_b| plus one rounding of
// out's dtype (vt/ops/matmul.h). Block-wise (128 x 128) and per-channel/per-token scales,
// N and K not multiples of 128 (nor of 16), M = 1..5 and 33 (the weight rows decoded in
// registers for one row of a, once into a buffer for more); the AVX2 and AVX-512 F32
// levels are checked to have taken the AVX2 rows, and at M = 1 (a decode step) to have taken the weight rows four at a time
// with each of the two fp8 decodes in turn (Fp8StreamDecode), subnormal weights under a
// caller's denormals-are-zero included; the AVX-512 BF16 levels to have taken their own
// rows. A weight row holding a NaN code gives NaN there and nothing else changes. A row's
// bytes do not depend on the other rows of a. The quantizer and the GEMM together: a
// block-quantized product is close to the unquantized one.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "matmul_test_util.h"
#include "vt/cpu/matmul/kernels.h"  // Fp8GroupScaledAvx2Calls

namespace {

using vt::DType;

struct Problem {
  int64_t M, N, K, bn, bk;
  std::vector<uint8_t> a, b;
  std::vector<float> sa, sb, bias;
};

Problem Make(int64_t M, int64_t N, int64_t K, int64_t bn, int64_t bk, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ex(-10.0f, 0.0f);
  Problem p{M, N, K, bn, bk, vt_test::RandomFp8(M * K, rng), vt_test::RandomFp8(N * K, rng), {}, {}, {}};
  const int64_t G = (K + bk - 1) / bk, NB = (N + bn - 1) / bn;
  p.sa.resize(static_cast<size_t>(M * G));
  p.sb.resize(static_cast<size_t>(NB * G));
  for (auto& x : p.sa) x = std::exp2(ex(rng));
  for (auto& x : p.sb) x = std::exp2(ex(rng));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  p.bias.resize(static_cast<size_t>(N));
  for (auto& x : p.bias) x = nd(rng);
  return p;
}

// The rows a level's queue runs (matmul/fp8_group_scaled.cpp): AVX-512 BF16 where the
// processor has AVX512-VBMI, AVX2 on the other x86 SIMD levels, else portable.
enum class Kernel { kPortable, kAvx2, kAvx512 };
Kernel KernelFor(vt::CpuIsa isa) {
#if defined(__x86_64__)
  if (isa >= vt::CpuIsa::kAvx512Bf16 && isa <= vt::CpuIsa::kAmx && __builtin_cpu_supports("avx512vbmi"))
    return Kernel::kAvx512;
  if (isa >= vt::CpuIsa::kAvx2 && isa <= vt::CpuIsa::kAmx) return Kernel::kAvx2;
#endif
  (void)isa;
  return Kernel::kPortable;
}

// The float64 product of p (plus its bias where with_bias) and the sums of |terms|.
void Reference(const Problem& p, bool with_bias, std::vector<double>& ref, std::vector<double>& mag) {
  const int64_t G = (p.K + p.bk - 1) / p.bk;
  ref.assign(static_cast<size_t>(p.M * p.N), 0.0);
  mag.assign(ref.size(), 0.0);
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t n = 0; n < p.N; ++n) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        const double t = vt_test::DecodeE4M3(p.a[m * p.K + k]) * vt_test::DecodeE4M3(p.b[n * p.K + k]) *
                         p.sa[m * G + k / p.bk] * p.sb[(n / p.bn) * G + k / p.bk];
        s += t;
        a += std::fabs(t);
      }
      ref[m * p.N + n] = s + (with_bias ? p.bias[n] : 0.0);
      mag[m * p.N + n] = a;
    }
}

void Check(const Problem& p, DType od, bool with_bias) {
  const int64_t G = (p.K + p.bk - 1) / p.bk, NB = (p.N + p.bn - 1) / p.bn;
  std::vector<double> ref, mag;
  Reference(p, with_bias, ref, mag);
  const vt::Tensor a = vt::Tensor::FromHost(p.a.data(), {p.M, p.K}, DType::kF8E4M3);
  const vt::Tensor b = vt::Tensor::FromHost(p.b.data(), {p.N, p.K}, DType::kF8E4M3);
  const vt::Tensor sa = vt::Tensor::FromHost(p.sa.data(), {p.M, G}, DType::kF32);
  const vt::Tensor sb = vt::Tensor::FromHost(p.sb.data(), {NB, G}, DType::kF32);
  const vt::Tensor bias = vt::Tensor::FromHost(p.bias.data(), {p.N}, DType::kF32);
  namespace mm = vt::cpu::matmul;
  struct RestoreAuto {
    ~RestoreAuto() { mm::SetFp8StreamDecode(mm::Fp8StreamDecode::kAuto); }
  } restore;
  // A decode step's four-row path: each decode in turn (the setting only matters on x86).
  const std::vector<mm::Fp8StreamDecode> decodes =
      p.M == 1 ? std::vector{mm::Fp8StreamDecode::kHalf, mm::Fp8StreamDecode::kF32Bits}
               : std::vector{mm::Fp8StreamDecode::kAuto};
  for (mm::Fp8StreamDecode decode : decodes) {
    mm::SetFp8StreamDecode(decode);
    const bool bits = decode == mm::Fp8StreamDecode::kF32Bits;
    for (vt::CpuIsa isa : vt_test::IsaLevels()) {
      SCOPED_TRACE(vt::StrCat(p.M, "x", p.N, "x", p.K, " blocks ", p.bn, "x", p.bk, " out ", vt::DTypeName(od),
                              with_bias ? " bias" : "", " on ", vt::CpuIsaName(isa), " decode ",
                              static_cast<int>(decode)));
      vt::Queue q = vt_test::QueueFor(isa);
      vt::Tensor out = vt::Tensor::Empty({p.M, p.N}, od);
      const int64_t avx2_before = mm::Fp8GroupScaledAvx2Calls(), avx512_before = mm::Fp8GroupScaledAvx512Calls();
      const int64_t bits_before = mm::Fp8GroupScaledRows4(true), half_before = mm::Fp8GroupScaledRows4(false);
      const int64_t pairs_before = mm::Fp8GroupScaledPairRows();
      vt::MatmulFp8GroupScaled(q, out, a, sa, b, sb, p.bn, p.bk, with_bias ? &bias : nullptr);
      const Kernel want = KernelFor(isa);
      EXPECT_EQ(mm::Fp8GroupScaledAvx2Calls() - avx2_before, want == Kernel::kAvx2 ? 1 : 0);
      EXPECT_EQ(mm::Fp8GroupScaledAvx512Calls() - avx512_before, want == Kernel::kAvx512 ? 1 : 0);
      // At most two threads, each taking its rows four at a time and at most 3 one by one.
      const int64_t rows4_bits = mm::Fp8GroupScaledRows4(true) - bits_before;
      const int64_t rows4_half = mm::Fp8GroupScaledRows4(false) - half_before;
      if (want == Kernel::kAvx2 && p.M == 1) {
        if (p.N >= 8) {
          EXPECT_GE(bits ? rows4_bits : rows4_half, p.N - 6);
        }
        EXPECT_EQ(bits ? rows4_half : rows4_bits, 0);
      } else {
        EXPECT_EQ(rows4_bits + rows4_half, 0);
      }
      // 2 to 8 rows of a: weight rows in pairs in registers, but for each thread's odd last.
      const int64_t pair_rows = mm::Fp8GroupScaledPairRows() - pairs_before;
      if (want == Kernel::kAvx2 && p.M >= 2 && p.M <= 8) {
        EXPECT_GE(pair_rows, p.N - 2);
      } else {
        EXPECT_EQ(pair_rows, 0);
      }
      std::vector<float> got(static_cast<size_t>(p.M * p.N));
      for (int64_t i = 0; i < p.M * p.N; ++i)
        got[i] = od == DType::kF32 ? out.data_as<float>()[i] : vt::Bf16ToFloat(out.data_as<uint16_t>()[i]);
      EXPECT_EQ(vt_test::CheckWithinBound(got, p.N, [&](int64_t i) { return ref[i]; },
                                          [&](int64_t i) {
                                            return vt_test::MatmulBound(ref[i], mag[i], 1.0,
                                                                        with_bias ? p.bias[i % p.N] : 0.0, p.K, od);
                                          }),
                0);
    }
  }
}

TEST(MatmulFp8GroupScaled, BlockScalesAgainstFloat64) {
  uint32_t seed = 1;
  for (int64_t M : {1, 2, 3, 4, 5, 8, 9, 33})
    for (auto [N, K] : {std::pair<int64_t, int64_t>{300, 520}, {129, 257}, {7, 1}, {256, 128}, {130, 1000}}) {
      const Problem p = Make(M, N, K, 128, 128, ++seed);
      Check(p, DType::kF32, false);
      Check(p, DType::kBF16, true);
    }
}

TEST(MatmulFp8GroupScaled, PerChannelScalesAgainstFloat64) {
  uint32_t seed = 100;
  // M = 61 with N = 600: the threads take their columns in several pieces (more than 16 rows).
  for (int64_t M : {1, 2, 4, 5, 33, 61})
    for (auto [N, K] : {std::pair<int64_t, int64_t>{300, 520}, {65, 129}, {33, 67}, {600, 128}}) {
      const Problem p = Make(M, N, K, 1, K, ++seed);
      Check(p, DType::kBF16, false);
      Check(p, DType::kF32, true);
    }
}

// A NaN weight code (S.1111.111) makes that output column NaN for every row of a, on every
// level: the AVX2 decode makes it finite, so its rows go the portable way.
TEST(MatmulFp8GroupScaled, NanWeightCodeGivesNanInItsColumnOnly) {
  for (int64_t M : {1, 3, 6}) {
    Problem p = Make(M, 40, 300, 128, 128, 77);
    p.b[17 * p.K + 200] = 0xFF;  // row 17, group 1
    const int64_t G = 3;
    const vt::Tensor a = vt::Tensor::FromHost(p.a.data(), {p.M, p.K}, DType::kF8E4M3);
    const vt::Tensor b = vt::Tensor::FromHost(p.b.data(), {p.N, p.K}, DType::kF8E4M3);
    const vt::Tensor sa = vt::Tensor::FromHost(p.sa.data(), {p.M, G}, DType::kF32);
    const vt::Tensor sb = vt::Tensor::FromHost(p.sb.data(), {1, G}, DType::kF32);
    for (vt::CpuIsa isa : vt_test::IsaLevels()) {
      vt::Queue q = vt_test::QueueFor(isa);
      vt::Tensor out = vt::Tensor::Empty({p.M, p.N}, DType::kF32);
      vt::MatmulFp8GroupScaled(q, out, a, sa, b, sb, 128, 128);
      for (int64_t m = 0; m < p.M; ++m)
        for (int64_t n = 0; n < p.N; ++n) {
          double ref = 0, mag = 0;
          for (int64_t k = 0; k < p.K; ++k) {
            const double t = vt_test::DecodeE4M3(p.a[m * p.K + k]) * vt_test::DecodeE4M3(p.b[n * p.K + k]) *
                             p.sa[m * G + k / 128] * p.sb[k / 128];
            ref += t;
            mag += std::fabs(t);
          }
          const float got = out.data_as<float>()[m * p.N + n];
          if (n == 17)
            EXPECT_TRUE(std::isnan(got)) << vt::CpuIsaName(isa) << " m " << m;
          else
            EXPECT_NEAR(got, ref, 4.0 * static_cast<double>(p.K) * FLT_EPSILON * mag)
                << vt::CpuIsaName(isa) << " m " << m << " n " << n;
        }
    }
  }
}

// Block quantization then the block GEMM approximates the product of the unquantized
// values: catches a transposed or misindexed weight-scale layout that the float64 check
// of the GEMM alone (which uses the same layout) would share.
TEST(MatmulFp8GroupScaled, QuantizedProductApproximatesTheOriginal) {
  const int64_t M = 3, N = 200, K = 300;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * K)), w(static_cast<size_t>(N * K));
  for (auto& v : x) v = nd(rng);
  // Each 128 x 128 block of the weight at its own magnitude.
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) w[n * K + k] = nd(rng) * std::exp2(static_cast<float>((n / 128) * 3 + (k / 128) * 5 - 6));
  vt::Queue q = vt::Queue::Cpu(2);
  const vt::Tensor xt = vt_test::MakeTensor(x, {M, K}, DType::kF32);
  vt::Tensor a = vt::Tensor::Empty({M, K}, DType::kF8E4M3), sa = vt::Tensor::Empty({M, 3}, DType::kF32);
  vt::QuantFp8PerTokenGroup(q, a, sa, xt, 128, vt::kFp8BlockAmaxFloor, 0.0f);
  // The weight's blocks: scale = amax / 448 per 128 x 128 block, as the checkpoints store it.
  std::vector<float> sbv(2 * 3);
  std::vector<uint8_t> bv(static_cast<size_t>(N * K));
  for (int64_t bn = 0; bn < 2; ++bn)
    for (int64_t bk = 0; bk < 3; ++bk) {
      float amax = 0;
      for (int64_t n = bn * 128; n < std::min<int64_t>(N, bn * 128 + 128); ++n)
        for (int64_t k = bk * 128; k < std::min<int64_t>(K, bk * 128 + 128); ++k) amax = std::max(amax, std::fabs(w[n * K + k]));
      sbv[bn * 3 + bk] = amax / 448.0f;
      for (int64_t n = bn * 128; n < std::min<int64_t>(N, bn * 128 + 128); ++n)
        for (int64_t k = bk * 128; k < std::min<int64_t>(K, bk * 128 + 128); ++k)
          bv[n * K + k] = vt::FloatToFp8E4M3(w[n * K + k] / sbv[bn * 3 + bk]);
    }
  const vt::Tensor b = vt::Tensor::FromHost(bv.data(), {N, K}, DType::kF8E4M3);
  const vt::Tensor sb = vt::Tensor::FromHost(sbv.data(), {2, 3}, DType::kF32);
  vt::Tensor out = vt::Tensor::Empty({M, N}, DType::kF32);
  vt::MatmulFp8GroupScaled(q, out, a, sa, b, sb, 128, 128);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        s += static_cast<double>(x[m * K + k]) * w[n * K + k];
        mag += std::fabs(static_cast<double>(x[m * K + k]) * w[n * K + k]);
      }
      // Two e4m3 roundings (3 mantissa bits: relative error <= 2^-4 each) per product.
      EXPECT_NEAR(out.data_as<float>()[m * N + n], s, 0.13 * mag) << m << ", " << n;
    }
}

#if defined(__x86_64__)
// Every weight subnormal, with the caller's MXCSR set to denormals-are-zero and
// flush-to-zero (the queue's threads, made after, inherit it): the kF32Bits decode makes
// subnormal f32 weights, which must not count as 0. All codes positive, so that the sums
// have no cancellation and a weight counted as 0 is far outside Check's bound; both
// decodes at M = 1.
TEST(MatmulFp8GroupScaled, DecodeStepKeepsSubnormalWeightsUnderDaz) {
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | 0x8040u);
  for (auto [N, K, bk] : {std::tuple<int64_t, int64_t, int64_t>{64, 256, 128}, {40, 300, 300}}) {
    Problem p = Make(1, N, K, bk == K ? 1 : 128, bk, 5);
    for (auto& c : p.b) c = static_cast<uint8_t>(1 + (c & 0x06));  // positive subnormals
    for (auto& c : p.a) c &= 0x7F;                                 // positive
    Check(p, DType::kF32, false);
  }
  _mm_setcsr(csr);
}
#endif

// A row of a gets the same bytes in a product of any number of rows as alone (M = 1), on
// every level and, on the AVX2 ones, with each fp8 decode: the MoE experts multiply all of
// an expert's tokens at once on that promise (cpu/moe.cpp). Block scales with K and N not
// multiples of the block (nor of the kernels' steps), blocks narrower than a step, and
// per-channel scales; a weight row holding a NaN code (on AVX2 its three partners of a
// decode step's four rows then take the one-row path). Rows of a are repeated in other
// positions, F32 and BF16 outputs, with a bias.
TEST(MatmulFp8GroupScaled, ARowsBytesInAnyProductAreItsBytesAlone) {
  namespace mm = vt::cpu::matmul;
  struct RestoreAuto {
    ~RestoreAuto() { mm::SetFp8StreamDecode(mm::Fp8StreamDecode::kAuto); }
  } restore;
  struct S {
    int64_t N, K, bn, bk;
    bool nan;
  };
  const S shapes[] = {{300, 1000, 128, 128, false}, {131, 300, 16, 32, true}, {70, 520, 1, 520, false},
                      {45, 200, 128, 128, true}};
  uint32_t seed = 300;
  for (const S& s : shapes) {
    Problem pool = Make(40, s.N, s.K, s.bn, s.bk, ++seed);
    if (s.nan) pool.b[9 * s.K + s.K / 2] = 0x7F;  // row 9
    const int64_t G = (s.K + s.bk - 1) / s.bk, NB = (s.N + s.bn - 1) / s.bn;
    const vt::Tensor b = vt::Tensor::FromHost(pool.b.data(), {s.N, s.K}, DType::kF8E4M3);
    const vt::Tensor sb = vt::Tensor::FromHost(pool.sb.data(), {NB, G}, DType::kF32);
    const vt::Tensor bias = vt::Tensor::FromHost(pool.bias.data(), {s.N}, DType::kF32);
    // The product of rows `rows` of the pool's a.
    auto run = [&](const vt::Queue& q, const std::vector<int64_t>& rows, DType od) {
      std::vector<uint8_t> a;
      std::vector<float> sa;
      for (int64_t r : rows) {
        a.insert(a.end(), pool.a.begin() + r * s.K, pool.a.begin() + (r + 1) * s.K);
        sa.insert(sa.end(), pool.sa.begin() + r * G, pool.sa.begin() + (r + 1) * G);
      }
      const int64_t M = static_cast<int64_t>(rows.size());
      vt::Tensor out = vt::Tensor::Empty({M, s.N}, od);
      vt::MatmulFp8GroupScaled(q, out, vt::Tensor::FromHost(a.data(), {M, s.K}, DType::kF8E4M3),
                               vt::Tensor::FromHost(sa.data(), {M, G}, DType::kF32), b, sb, s.bn, s.bk,
                               od == DType::kBF16 ? &bias : nullptr);
      return vt_test::BytesOf(out);
    };
    std::mt19937 rng(seed);
    for (vt::CpuIsa isa : vt_test::IsaLevels()) {
      const bool avx2 = KernelFor(isa) == Kernel::kAvx2;
      for (mm::Fp8StreamDecode decode :
           avx2 ? std::vector{mm::Fp8StreamDecode::kHalf, mm::Fp8StreamDecode::kF32Bits}
                : std::vector{mm::Fp8StreamDecode::kAuto}) {
        mm::SetFp8StreamDecode(decode);
        const vt::Queue q = vt_test::QueueFor(isa);
        for (DType od : {DType::kF32, DType::kBF16}) {
          const size_t row = static_cast<size_t>(s.N) * vt::DTypeSize(od);
          for (int64_t M : {2, 3, 5, 7, 17, 40}) {
            std::vector<int64_t> rows;
            for (int64_t i = 0; i < M; ++i) rows.push_back(static_cast<int64_t>(rng() % pool.M));
            const std::vector<uint8_t> got = run(q, rows, od);
            for (int64_t i = 0; i < M; ++i) {
              const std::vector<uint8_t> alone = run(q, {rows[i]}, od);
              const std::vector<uint8_t> in_product(got.begin() + i * row, got.begin() + (i + 1) * row);
              EXPECT_EQ(vt_test::FirstDiff(alone, in_product), -1)
                  << s.N << "x" << s.K << " blocks " << s.bn << "x" << s.bk << " on " << vt::CpuIsaName(isa)
                  << " decode " << static_cast<int>(decode) << " " << vt::DTypeName(od) << ": row " << rows[i]
                  << " at " << i << " of " << M;
            }
          }
        }
      }
    }
  }
}

// A weight prepared for the op (vt::PrepareWeight, WeightUse::kMatmulGroupScaledB, as the
// linears and MoE experts are): on the AVX2 rows it is laid out as
// MatmulFp8's prepared weights and multiplied by outer-product tiles, its own bytes released.
// Against float64 at M = 1..40 (both fp8 decodes), block and per-channel scales, block_n
// under 8 and not a multiple of it, K and N not multiples of 8 or of the groups, BF16 and F32
// out, with and without bias; each row's bytes are those it gets alone; a row slice that
// starts anywhere on a block of scale rows reads the copy and gives the whole weight's
// columns byte for byte. The packed calls are counted, so a test that silently took another path fails.
struct PackedShape {
  int64_t N, K, bn, bk;
};

// out = a · b on the queue, M rows of p (a's rows from row m0), b a tensor over p's codes.
vt::Tensor RunRows(const vt::Queue& q, const Problem& p, int64_t m0, int64_t M, const vt::Tensor& b,
                   const vt::Tensor& sb, DType od, bool with_bias) {
  const int64_t G = (p.K + p.bk - 1) / p.bk;
  vt::Tensor out = vt::Tensor::Empty({M, b.dim(0)}, od);
  const vt::Tensor bias = vt::Tensor::FromHost(p.bias.data(), {b.dim(0)}, DType::kF32);
  vt::MatmulFp8GroupScaled(q, out, vt::Tensor::FromHost(p.a.data() + m0 * p.K, {M, p.K}, DType::kF8E4M3),
                           vt::Tensor::FromHost(p.sa.data() + m0 * G, {M, G}, DType::kF32), b, sb, p.bn, p.bk,
                           with_bias ? &bias : nullptr);
  return out;
}

std::vector<float> Floats(const vt::Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = t.dtype() == DType::kF32 ? t.data_as<float>()[i] : vt::Bf16ToFloat(t.data_as<uint16_t>()[i]);
  return v;
}

TEST(MatmulFp8GroupScaled, LaidOutWeightAgainstFloat64AndAlone) {
  namespace mm = vt::cpu::matmul;
  struct RestoreAuto {
    ~RestoreAuto() { mm::SetFp8StreamDecode(mm::Fp8StreamDecode::kAuto); }
  } restore;
  int packed_levels = 0;
  // The last two: groups longer than one panel of the many-row kernel (128 pairs of K).
  const PackedShape shapes[] = {{300, 520, 128, 128}, {13, 200, 1, 200}, {40, 16, 1, 16},
                                {136, 130, 128, 128}, {72, 257, 8, 64},  {50, 300, 24, 100},
                                {24, 600, 8, 600},    {20, 700, 16, 512}};
  for (const PackedShape& sh : shapes) {
    const Problem p = Make(40, sh.N, sh.K, sh.bn, sh.bk, static_cast<uint32_t>(sh.N * 31 + sh.K));
    const int64_t G = (p.K + p.bk - 1) / p.bk, NB = (p.N + p.bn - 1) / p.bn;
    std::vector<double> ref, mag;
    Reference(p, true, ref, mag);
    vt::Tensor b = vt::Tensor::FromHost(p.b.data(), {p.N, p.K}, DType::kF8E4M3);
    b.SetReadOnly();
    const vt::Tensor sb = vt::Tensor::FromHost(p.sb.data(), {NB, G}, DType::kF32);
    for (mm::Fp8StreamDecode decode : {mm::Fp8StreamDecode::kHalf, mm::Fp8StreamDecode::kF32Bits}) {
      mm::SetFp8StreamDecode(decode);
      for (vt::CpuIsa isa : vt_test::IsaLevels()) {
        SCOPED_TRACE(vt::StrCat(p.N, "x", p.K, " blocks ", p.bn, "x", p.bk, " on ", vt::CpuIsaName(isa), " decode ",
                                static_cast<int>(decode)));
        const vt::Queue q = vt_test::QueueFor(isa);
        const bool avx2 = KernelFor(isa) == Kernel::kAvx2, laid_out = avx2 || KernelFor(isa) == Kernel::kAvx512;
        const int64_t weights_before = mm::Fp8GroupScaledPackedWeights();
        const vt::Tensor pb = vt::PrepareWeight(q, b, vt::WeightUse::kMatmulGroupScaledB);
        EXPECT_EQ(pb.backend_layout() != nullptr, laid_out);
        EXPECT_EQ(mm::Fp8GroupScaledPackedWeights() - weights_before, laid_out ? 1 : 0);
        if (!laid_out) continue;
        ++packed_levels;
        EXPECT_TRUE(pb.ReleaseBytes());  // the kernels read only the laid-out copy
        for (DType od : {DType::kBF16, DType::kF32}) {
          for (int64_t M : {1, 2, 3, 5, 9, 17, 40}) {
            SCOPED_TRACE(vt::StrCat("M ", M, " out ", vt::DTypeName(od)));
            const int64_t calls = mm::Fp8GroupScaledPackedCalls(), panels = mm::Avx2PanelGemms();
            const vt::Tensor out = RunRows(q, p, 0, M, pb, sb, od, true);
            EXPECT_EQ(mm::Fp8GroupScaledPackedCalls() - calls, 1);
            // Up to 16 rows the threads split the blocks, so each call has every row: the
            // panels from kAvx2PanelMinRows rows, the tiles below.
            if (M <= 16) {
              EXPECT_EQ(mm::Avx2PanelGemms() > panels, avx2 && M >= mm::kAvx2PanelMinRows);
            }
            EXPECT_EQ(vt_test::CheckWithinBound(Floats(out), p.N, [&](int64_t i) { return ref[i]; },
                                                [&](int64_t i) {
                                                  return vt_test::MatmulBound(ref[i], mag[i], 1.0, p.bias[i % p.N],
                                                                              p.K, od);
                                                }),
                      0);
            // Rows 0, M / 2 and M - 1 alone give the same bytes as in the product.
            const std::vector<uint8_t> all = vt_test::BytesOf(out);
            const size_t row_bytes = static_cast<size_t>(p.N) * vt::DTypeSize(od);
            for (int64_t m : {int64_t{0}, M / 2, M - 1}) {
              const std::vector<uint8_t> alone = vt_test::BytesOf(RunRows(q, p, m, 1, pb, sb, od, true));
              const std::vector<uint8_t> in_product(all.begin() + m * row_bytes, all.begin() + (m + 1) * row_bytes);
              EXPECT_EQ(vt_test::FirstDiff(alone, in_product), -1) << "row " << m;
            }
          }
        }
        // Row slices (starting on a block of scale rows, inside a block of 8 rows where
        // block_n is not a multiple of 8) read the copy: their columns are the whole
        // weight's, byte for byte.
        for (const int64_t r0 : {p.bn % 8 == 0 ? p.bn : 8 * p.bn, p.bn % 8 == 0 ? p.bn : 3 * p.bn}) {
          if (r0 >= p.N) continue;
          SCOPED_TRACE(vt::StrCat("rows from ", r0));
          const vt::Tensor whole = RunRows(q, p, 0, 5, pb, sb, DType::kF32, false);
          const int64_t calls = mm::Fp8GroupScaledPackedCalls();
          const vt::Tensor part = RunRows(q, p, 0, 5, pb.Slice(0, r0, p.N), sb.Slice(0, r0 / p.bn, NB), DType::kF32,
                                          false);
          EXPECT_EQ(mm::Fp8GroupScaledPackedCalls() - calls, 1);
          for (int64_t m = 0; m < 5; ++m)
            for (int64_t n = r0; n < p.N; ++n)
              ASSERT_EQ(part.data_as<float>()[m * (p.N - r0) + n - r0], whole.data_as<float>()[m * p.N + n])
                  << m << " " << n;
        }
      }
    }
  }
#if defined(__x86_64__)
  if (vt::DetectCpuIsa() >= vt::CpuIsa::kAvx2) {
    EXPECT_GT(packed_levels, 0);  // x86 CI machines have AVX2
  }
#endif
}

// Where the copy cannot serve a call, the codes are read back out of it and multiplied as
// stored, with the stored weight's bytes: groups of an odd size that split a pair of K (the
// whole weight and a row slice), and a queue of another level (scalar). A weight holding a
// NaN code is not laid out (the layout's decodes would make it finite).
TEST(MatmulFp8GroupScaled, LaidOutWeightFallsBackToItsCodes) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the laid-out copies are the x86 levels'";
#else
  namespace mm = vt::cpu::matmul;
  if (vt::DetectCpuIsa() < vt::CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2 on this processor";
  const vt::Queue avx2_queue = vt_test::QueueFor(vt::CpuIsa::kAvx2);
  // The AVX2 layout, and the AVX-512 one (K in steps of 4) where this processor has it.
  std::vector<vt::CpuIsa> layouts = {vt::CpuIsa::kAvx2};
  if (KernelFor(vt::DetectCpuIsa()) == Kernel::kAvx512) layouts.push_back(vt::CpuIsa::kAvx512Bf16);
  for (vt::CpuIsa level : layouts)
  for (int64_t bk : {int64_t{128}, int64_t{65}}) {
    SCOPED_TRACE(vt::StrCat("laid out for ", vt::CpuIsaName(level), ", groups of ", bk));
    const vt::Queue lq = vt_test::QueueFor(level);
    const Problem p = Make(6, 60, 200, bk == 65 ? 4 : 128, bk, 5);
    const int64_t G = (p.K + p.bk - 1) / p.bk, NB = (p.N + p.bn - 1) / p.bn;
    vt::Tensor b = vt::Tensor::FromHost(p.b.data(), {p.N, p.K}, DType::kF8E4M3);
    b.SetReadOnly();
    const vt::Tensor sb = vt::Tensor::FromHost(p.sb.data(), {NB, G}, DType::kF32);
    const vt::Tensor pb = vt::PrepareWeight(lq, b, vt::WeightUse::kMatmulGroupScaledB);
    ASSERT_NE(pb.backend_layout(), nullptr);
    ASSERT_TRUE(pb.ReleaseBytes());
    const int64_t calls = mm::Fp8GroupScaledPackedCalls();
    // Rows 4.. (with bn = 4 the start of a scale row).
    const int64_t r0 = 4;
    if (bk == 65) {
      const vt::Tensor s_tail = sb.Slice(0, r0 / p.bn, NB);
      EXPECT_EQ(vt_test::FirstDiff(vt_test::BytesOf(RunRows(lq, p, 0, 6, pb.Slice(0, r0, p.N), s_tail,
                                                             DType::kBF16, false)),
                                   vt_test::BytesOf(RunRows(lq, p, 0, 6, b.Slice(0, r0, p.N), s_tail,
                                                            DType::kBF16, false))),
                -1);
    }
    // Odd groups on the whole weight (bk 65), and the scalar level (either).
    if (bk == 65) {
      EXPECT_EQ(vt_test::FirstDiff(vt_test::BytesOf(RunRows(lq, p, 0, 6, pb, sb, DType::kBF16, true)),
                                   vt_test::BytesOf(RunRows(lq, p, 0, 6, b, sb, DType::kBF16, true))),
                -1);
    }
    const vt::Queue scalar = vt_test::QueueFor(vt::CpuIsa::kScalar);
    EXPECT_EQ(vt_test::FirstDiff(vt_test::BytesOf(RunRows(scalar, p, 0, 6, pb, sb, DType::kF32, true)),
                                 vt_test::BytesOf(RunRows(scalar, p, 0, 6, b, sb, DType::kF32, true))),
              -1);
    EXPECT_EQ(mm::Fp8GroupScaledPackedCalls() - calls, 0);
  }
  Problem p = Make(1, 16, 64, 128, 128, 9);
  p.b[3 * 64 + 10] = 0x7F;  // a NaN code in row 3
  vt::Tensor b_nan = vt::Tensor::FromHost(p.b.data(), {16, 64}, DType::kF8E4M3);
  b_nan.SetReadOnly();
  const int64_t weights = mm::Fp8GroupScaledPackedWeights();
  EXPECT_EQ(vt::PrepareWeight(avx2_queue, b_nan, vt::WeightUse::kMatmulGroupScaledB).backend_layout(), nullptr);
  EXPECT_EQ(mm::Fp8GroupScaledPackedWeights(), weights);
#endif
}

TEST(MatmulFp8GroupScaled, RejectsBadScaleShapes) {
  vt::Queue q = vt::Queue::Cpu(1);
  std::vector<uint8_t> z(300 * 200, 0);
  const vt::Tensor a = vt::Tensor::FromHost(z.data(), {2, 200}, DType::kF8E4M3);
  const vt::Tensor b = vt::Tensor::FromHost(z.data(), {130, 200}, DType::kF8E4M3);
  vt::Tensor out = vt::Tensor::Empty({2, 130}, DType::kBF16);
  const vt::Tensor sa = vt::Tensor::Empty({2, 2}, DType::kF32), sb = vt::Tensor::Empty({2, 2}, DType::kF32);
  const vt::Tensor sb_bad = vt::Tensor::Empty({1, 2}, DType::kF32);
  EXPECT_THROW(vt::MatmulFp8GroupScaled(q, out, a, sa, b, sb_bad, 128, 128), vt::Error);
  EXPECT_THROW(vt::MatmulFp8GroupScaled(q, out, a, sb_bad, b, sb, 128, 128), vt::Error);
  EXPECT_THROW(vt::MatmulFp8GroupScaled(q, out, a, sa, b, sb, 0, 128), vt::Error);
  std::memset(sa.data(), 0, sa.nbytes());
  std::memset(sb.data(), 0, sb.nbytes());
  EXPECT_NO_THROW(vt::MatmulFp8GroupScaled(q, out, a, sa, b, sb, 128, 128));
}

}  // namespace
