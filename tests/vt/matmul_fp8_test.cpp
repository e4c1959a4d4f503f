// MatmulFp8 against a float64 reference computed here from the e4m3fn format, at odd
// shapes and tails, on every CPU ISA level up to the processor's, with 1 and 3 threads;
// and against cuBLASLt's outputs (tests/fixtures/oracles/fp8ops).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "elementwise_test_util.h"
#include "matmul_test_util.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include "vt/cpu/matmul/kernels.h"
#include "vt/vt.h"

namespace {

// The 256 e4m3fn codes decoded from the format: 1 sign, 4 exponent bits (bias 7), 3
// mantissa bits; exponent 0 is subnormal (m * 2^-9); S.1111.111 is NaN.
const std::vector<double>& Fp8Values() {
  static const std::vector<double> table = [] {
    std::vector<double> t(256);
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 15, m = c & 7;
      double v;
      if (e == 15 && m == 7) {
        v = std::nan("");
      } else if (e == 0) {
        v = std::ldexp(static_cast<double>(m), -9);
      } else {
        v = std::ldexp(1.0 + m / 8.0, e - 7);
      }
      t[c] = (c & 0x80) ? -v : v;
    }
    return t;
  }();
  return table;
}

using vt_test::RandomFp8;


std::vector<float> ToFloats(const vt::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == vt::DType::kF32) {
    t.CopyToHost(out.data());
  } else {
    std::vector<uint16_t> h(out.size());
    t.CopyToHost(h.data());
    for (size_t i = 0; i < h.size(); ++i) out[i] = vt::Bf16ToFloat(h[i]);
  }
  return out;
}

// Float64 products of the fp8 operands: dot[m,n] = Σ a·b, mag[m,n] = Σ |a·b|.
struct Reference {
  std::vector<double> dot, mag;
};

Reference ComputeReference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int64_t M, int64_t N,
                           int64_t K) {
  const auto& v = Fp8Values();
  Reference r{std::vector<double>(M * N), std::vector<double>(M * N)};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, t = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = v[a[m * K + k]] * v[b[n * K + k]];
        s += p;
        t += std::fabs(p);
      }
      r.dot[m * N + n] = s;
      r.mag[m * N + n] = t;
    }
  return r;
}

// The DESIGN contract: 4·K·FLT_EPSILON·|alpha|·Σ|a·b|, plus the f32 rounding of the bias
// addition, plus one rounding of the output dtype (half an ulp: 2^-8 relative for BF16).


TEST(MatmulFp8, MatchesFloat64ReferenceOnEveryIsa) {
  // Ms from decode to prefill; odd N and K, K = 1, K past one K block (2048 BF16 /
  // 1024 F32 columns), N past one 128-row panel, N smaller than the threads' share.
  const std::vector<vt_test::Shape3> shapes = {
      {1, 7, 1},    {1, 33, 67},    {2, 5, 31},     {3, 67, 100},  {5, 9, 257},    {16, 13, 33},
      {17, 31, 65}, {64, 11, 129},  {65, 35, 1},    {130, 7, 97},  {1, 301, 2501}, {17, 137, 1100},
      {65, 261, 2113}, {130, 45, 3}, {4, 1, 5},
      // Small-M streaming path: whole 64-value K steps only, whole 4-row weight groups
      // plus a tail, M on and between multiples of 4; blocks of 8 rows of a (two 2-row
      // weight tiles per group) with 1..7 rows left, long rows past the prefetch distance.
      {4, 8, 128}, {8, 13, 64}, {15, 6, 192}, {9, 11, 1600}, {12, 9, 130}, {16, 10, 3000},
      // Quarter streams (M <= 4): many groups, rows left over, long rows with a K tail.
      {2, 70, 2100}, {4, 37, 1600},
      // AMX wide path: 16-row blocks of a in pairs and alone, super-blocks of 256 rows
      // with a remainder, 16-row weight blocks with a remainder, long rows in K blocks of
      // 1024 with a partial last block, and both super-blocks and K blocks at once.
      {300, 21, 130}, {33, 17, 64}, {20, 5, 5000}, {70, 33, 4500}, {300, 19, 2100},
  };
  std::mt19937 rng(1234);
  const float alpha = 0.0123f;
  for (const vt_test::Shape3& s : shapes) {
    const auto a = RandomFp8(s.M * s.K, rng);
    const auto b = RandomFp8(s.N * s.K, rng);
    std::vector<float> bias_f(s.N);
    std::normal_distribution<float> nd(0.0f, 50.0f);
    for (auto& x : bias_f) x = nd(rng);
    const Reference ref = ComputeReference(a, b, s.M, s.N, s.K);
    const auto ta = vt::Tensor::FromHost(a.data(), {s.M, s.K}, vt::DType::kF8E4M3);
    const auto tb = vt::Tensor::FromHost(b.data(), {s.N, s.K}, vt::DType::kF8E4M3);
    const auto tbias = vt::Tensor::FromHost(bias_f.data(), {s.N}, vt::DType::kF32);
    for (vt::CpuIsa isa : vt_test::IsaLevels()) {
      for (int threads : {1, 3}) {
        const vt::Queue q = vt::Queue::Cpu(threads, isa);
        for (vt::DType od : {vt::DType::kF32, vt::DType::kBF16}) {
          for (bool with_bias : {false, true}) {
            // Half of the threads x out x bias product, every pair of the three still met: the
            // epilogue per out dtype and bias does not depend on the thread count.
            if (with_bias != ((threads == 3) != (od == vt::DType::kBF16))) continue;
            SCOPED_TRACE(vt::StrCat("M=", s.M, " N=", s.N, " K=", s.K, " isa=", vt::CpuIsaName(q.cpu_isa()),
                                    " threads=", threads, " out=", vt::DTypeName(od), " bias=", with_bias));
            auto out = vt::Tensor::Empty({s.M, s.N}, od);
            vt::MatmulFp8(q, out, ta, tb, alpha, with_bias ? &tbias : nullptr);
            const auto got = ToFloats(out);
            auto bias_at = [&](int64_t i) { return with_bias ? static_cast<double>(bias_f[i % s.N]) : 0.0; };
            auto want = [&](int64_t i) { return static_cast<double>(alpha) * ref.dot[i] + bias_at(i); };
            vt_test::CheckWithinBound(got, s.N, want, [&](int64_t i) {
              return vt_test::MatmulBound(want(i), ref.mag[i], alpha, bias_at(i), s.K, od);
            });
          }
        }
      }
    }
  }
  for (vt::CpuIsa isa : vt_test::IsaLevels()) std::cout << "[ MatmulFp8 ran on ] " << vt::CpuIsaName(isa) << "\n";
}

// Each ISA level runs its own kernel set, and small M its streaming path: without this a
// level could silently run another level's code and the reference comparisons above would
// still pass. Where the processor has AMX, also that the tiles did the work.
TEST(MatmulFp8, EachIsaLevelRunsItsKernelSet) {
  const std::map<vt::CpuIsa, std::string> set_of = {{vt::CpuIsa::kScalar, "scalar-f32"},
                                                    {vt::CpuIsa::kAvx2, "avx2-f32"},
                                                    {vt::CpuIsa::kAvx512, "avx512-f32"},
                                                    {vt::CpuIsa::kAvx512Bf16, "avx512bf16-dpbf16"},
                                                    {vt::CpuIsa::kAmx, "amx-bf16"}};
  std::mt19937 rng(77);
  const int64_t N = 40, K = 200;
  const auto b = vt::Tensor::FromHost(RandomFp8(N * K, rng).data(), {N, K}, vt::DType::kF8E4M3);
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    const vt::Queue q = vt_test::QueueFor(isa);
    for (int64_t M : {2, 6, 40}) {
      SCOPED_TRACE(vt::StrCat("isa=", vt::CpuIsaName(isa), " M=", M));
      const auto a = vt::Tensor::FromHost(RandomFp8(M * K, rng).data(), {M, K}, vt::DType::kF8E4M3);
      auto out = vt::Tensor::Empty({M, N}, vt::DType::kF32);
      const int64_t amx_before = vt::cpu::matmul::AmxStreamCalls();
      const int64_t bits_before = vt::cpu::matmul::F32BitsStreamCalls();
      vt::MatmulFp8(q, out, a, b, 0.5f);
      const vt::cpu::matmul::LastGemm last = vt::cpu::matmul::LastGemmOnThisThread();
#if defined(__x86_64__)
      // The F32 sets' stream decodes fp8 into f32 bits on AMD processors (by default).
      const bool f32_set = isa == vt::CpuIsa::kAvx2 || isa == vt::CpuIsa::kAvx512;
      EXPECT_EQ(vt::cpu::matmul::F32BitsStreamCalls() > bits_before,
                f32_set && last.stream && __builtin_cpu_is("amd"));
#else
      EXPECT_EQ(vt::cpu::matmul::F32BitsStreamCalls(), bits_before);
#endif
      ASSERT_NE(last.set, nullptr);
      EXPECT_EQ(std::string(last.set), set_of.at(isa));
      ASSERT_NE(last.epilogue, nullptr);
#if defined(__x86_64__)
      EXPECT_STREQ(last.epilogue, isa >= vt::CpuIsa::kAvx512 ? "avx512" : isa == vt::CpuIsa::kAvx2 ? "avx2" : "portable");
#else
      EXPECT_STREQ(last.epilogue, "portable");
#endif
      // Streaming: M <= 4 on the F32 sets, M <= 16 on the vdpbf16ps set; the AMX set
      // streams every M here, on the tiles from M = 4.
      const int64_t stream_max = isa == vt::CpuIsa::kAmx ? 4096 : isa == vt::CpuIsa::kAvx512Bf16 ? 16 : 4;
      EXPECT_EQ(last.stream, isa != vt::CpuIsa::kScalar && M <= stream_max);
      if (isa == vt::CpuIsa::kAmx && M >= 4) {
        EXPECT_GT(vt::cpu::matmul::AmxStreamCalls(), amx_before);
      } else {
        EXPECT_EQ(vt::cpu::matmul::AmxStreamCalls(), amx_before);
      }
    }
  }
  if (vt::DetectCpuIsa() < vt::CpuIsa::kAmx)
    std::cout << "[ AMX ] not on this processor: the AMX path is compiled here, not run\n";
}

// The epilogue (alpha, the packing unscale, bias, one rounding) is compiled once per vector
// width; each queue level's variant gives the bytes of an independent reference: the
// float products and sum, then for BF16 the nearer of the two neighbouring BF16 values
// (ties to the even one), NaN as NaN, on sums around every rounding case (ties, one bit
// past, subnormals, values that overflow, infinities, signed zeros) and a 77-column tail.
TEST(MatmulFp8, EpilogueGivesTheReferenceBytesAtEveryVectorWidth) {
  const int64_t rows = 3, cols = 77;
  std::mt19937 rng(99);
  std::vector<float> acc(rows * cols);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-140, 120);
  for (auto& x : acc) x = std::ldexp(nd(rng), ex(rng));
  auto bits = [](uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; };
  const std::vector<float> special = {bits(0x3F808000u), bits(0x3F818000u), bits(0x3F808001u), bits(0xBF80FFFFu),
                                      bits(0x00008000u), bits(0x80018000u), 0.0f, -0.0f, FLT_MAX, -FLT_MAX,
                                      INFINITY, -INFINITY, NAN, bits(0x7F7F8000u), bits(0x00000001u)};
  for (size_t i = 0; i < special.size(); ++i) acc[5 * i] = special[i];
  std::vector<float> bias(cols);
  for (auto& x : bias) x = nd(rng);
  bias[3] = -0.0f;
  auto to_bf16 = [](float v) -> double {  // the nearer BF16 neighbour, ties to the even one
    uint32_t u;
    std::memcpy(&u, &v, 4);
    if ((u & 0xFFFFu) == 0) return v;  // exact (zeros, infinities included)
    const uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;  // toward zero, away from zero
    float flo, fhi;
    std::memcpy(&flo, &lo, 4);
    std::memcpy(&fhi, &hi, 4);
    // Past the largest BF16 the upper neighbour is 2^128 for the distance (then infinity).
    const double dhi = std::isinf(fhi) ? std::copysign(std::ldexp(1.0, 128), v) : static_cast<double>(fhi);
    const double below = std::fabs(static_cast<double>(v) - flo), above = std::fabs(dhi - v);
    if (below != above) return below < above ? flo : fhi;
    return (lo >> 16) % 2 == 0 ? flo : fhi;
  };
  // alpha 1 with unscale 1 or 256 (exact) and no bias keeps the constructed ties as they are.
  for (const float unscale : {1.0f, 256.0f}) {
    for (const float alpha : {1.0f, 0.031f}) {
      for (const bool with_bias : {false, true}) {
        for (const vt::DType od : {vt::DType::kF32, vt::DType::kBF16}) {
          std::vector<double> want(acc.size());
          for (int64_t i = 0; i < rows * cols; ++i) {
            volatile float scaled = acc[i] * unscale;
            volatile float v = alpha * scaled;
            if (with_bias) v = v + bias[i % cols];
            want[i] = od == vt::DType::kF32 ? static_cast<double>(v) : to_bf16(v);
          }
          for (vt::CpuIsa isa : vt_test::IsaLevels()) {
            SCOPED_TRACE(vt::StrCat("isa=", vt::CpuIsaName(isa), " unscale=", unscale, " alpha=", alpha,
                                    " bias=", with_bias, " out=", vt::DTypeName(od)));
            std::vector<uint32_t> out(rows * cols, 0xDEADBEEFu);
            const std::string name =
                vt::cpu::matmul::StoreRowsForTest(static_cast<int>(isa), acc.data(), rows, cols, unscale, alpha,
                                                  with_bias ? bias.data() : nullptr, od, out.data());
#if defined(__x86_64__)
            EXPECT_EQ(name, isa >= vt::CpuIsa::kAvx512 ? "avx512" : isa == vt::CpuIsa::kAvx2 ? "avx2" : "portable");
#else
            EXPECT_EQ(name, "portable");
#endif
            for (int64_t i = 0; i < rows * cols; ++i) {
              float got;
              if (od == vt::DType::kF32) {
                std::memcpy(&got, &out[i], 4);
              } else {
                uint16_t h;
                std::memcpy(&h, reinterpret_cast<const uint16_t*>(out.data()) + i, 2);
                const uint32_t u = static_cast<uint32_t>(h) << 16;
                std::memcpy(&got, &u, 4);
              }
              if (std::isnan(want[i])) {
                EXPECT_TRUE(std::isnan(got)) << "element " << i;
              } else {
                EXPECT_EQ(static_cast<double>(got), want[i]) << "element " << i << " sum " << acc[i];
                EXPECT_EQ(std::signbit(got), std::signbit(want[i])) << "element " << i;
              }
            }
          }
        }
      }
    }
  }
}

TEST(MatmulFp8, BiasInBf16) {
  const int64_t M = 3, N = 19, K = 45;
  std::mt19937 rng(7);
  const auto a = RandomFp8(M * K, rng);
  const auto b = RandomFp8(N * K, rng);
  std::vector<uint16_t> bias(N);
  for (int64_t n = 0; n < N; ++n) bias[n] = vt::FloatToBf16(static_cast<float>(n) * 1.75f - 9.0f);
  const Reference ref = ComputeReference(a, b, M, N, K);
  const auto tbias = vt::Tensor::FromHost(bias.data(), {N}, vt::DType::kBF16);
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    const vt::Queue q = vt::Queue::Cpu(2, isa);
    auto out = vt::Tensor::Empty({M, N}, vt::DType::kF32);
    vt::MatmulFp8(q, out, vt::Tensor::FromHost(a.data(), {M, K}, vt::DType::kF8E4M3),
                  vt::Tensor::FromHost(b.data(), {N, K}, vt::DType::kF8E4M3), 0.5f, &tbias);
    const auto got = ToFloats(out);
    for (int64_t i = 0; i < M * N; ++i) {
      const double bb = vt::Bf16ToFloat(bias[i % N]);
      const double want = 0.5 * ref.dot[i] + bb;
      EXPECT_NEAR(got[i], want, vt_test::MatmulBound(want, ref.mag[i], 0.5, bb, K, vt::DType::kF32))
          << vt::CpuIsaName(isa) << " element " << i;
    }
  }
}

TEST(MatmulFp8, NanCodesPropagate) {
  const int64_t M = 3, N = 37, K = 70;
  std::mt19937 rng(11);
  auto a = RandomFp8(M * K, rng);
  auto b = RandomFp8(N * K, rng);
  a[1 * K + 40] = 0xFF;  // row 1 of a holds a NaN
  b[5 * K + 17] = 0x7F;  // weight row 5 holds one mid-row (the AVX2 stream's decode makes
  b[7 * K + 69] = 0xFF;  // NaN codes finite unless it notices), weight row 7 in the K tail
  for (vt::CpuIsa isa : vt_test::IsaLevels()) {
    const vt::Queue q = vt::Queue::Cpu(2, isa);
    auto out = vt::Tensor::Empty({M, N}, vt::DType::kBF16);
    vt::MatmulFp8(q, out, vt::Tensor::FromHost(a.data(), {M, K}, vt::DType::kF8E4M3),
                  vt::Tensor::FromHost(b.data(), {N, K}, vt::DType::kF8E4M3), 1.0f);
    const auto got = ToFloats(out);
    for (int64_t i = 0; i < M * N; ++i)
      EXPECT_EQ(std::isnan(got[i]), i / N == 1 || i % N == 5 || i % N == 7) << vt::CpuIsaName(isa) << " element " << i;
  }
}

#if defined(__x86_64__)
// The AVX2 stream's two fp8 decodes (Fp8StreamDecode in matmul/kernels.h), each forced in
// turn at every ISA level: uniform codes (1 in 16 subnormal), K tails, NaN codes in a and in
// weight rows, and the caller's MXCSR set to denormals-are-zero and flush-to-zero (the
// queue's threads, created after, inherit it). Within the bound, NaN exactly where a NaN
// meets, and the counter says which decode ran: f32 bits only where forced and only at the
// AVX2 and AVX-512 F32 levels (the other sets ignore the setting).
TEST(MatmulFp8, StreamDecodesWithinBound) {
  namespace mm = vt::cpu::matmul;
  struct RestoreAuto {
    ~RestoreAuto() { vt::cpu::matmul::SetFp8StreamDecode(vt::cpu::matmul::Fp8StreamDecode::kAuto); }
  } restore;
  // N = 24: every weight subnormal (where flushing them to zero would show).
  const std::vector<vt_test::Shape3> shapes = {{1, 37, 16},  {1, 64, 1030}, {2, 19, 70},
                                               {2, 24, 96}, {3, 40, 200},  {4, 33, 4104}};
  std::mt19937 rng(2024);
  int checked = 0;
  for (bool daz : {false, true}) {
    const unsigned csr = _mm_getcsr();
    if (daz) _mm_setcsr(csr | 0x8040u);
    for (mm::Fp8StreamDecode decode : {mm::Fp8StreamDecode::kHalf, mm::Fp8StreamDecode::kF32Bits}) {
      mm::SetFp8StreamDecode(decode);
      const bool bits = decode == mm::Fp8StreamDecode::kF32Bits;
      for (vt::CpuIsa isa : vt_test::IsaLevels()) {
        const bool f32_set = isa == vt::CpuIsa::kAvx2 || isa == vt::CpuIsa::kAvx512;
        const vt::Queue q = vt::Queue::Cpu(3, isa);
        for (const vt_test::Shape3& s : shapes) {
          SCOPED_TRACE(vt::StrCat("isa=", vt::CpuIsaName(isa), " decode=", bits ? "f32-bits" : "half", " daz=", daz,
                                  " M=", s.M, " N=", s.N, " K=", s.K));
          auto a = RandomFp8(s.M * s.K, rng), b = RandomFp8(s.N * s.K, rng);
          if (s.N == 24)
            for (auto& c : b) c &= 0x87;
          const bool nan = s.M == 3;
          if (nan) {
            a[1 * s.K + 7] = 0xFF;            // row 1 of a
            b[5 * s.K + s.K - 1] = 0x7F;      // weight row 5, last code (the K tail when K % 16 != 0)
            b[11 * s.K + 100] = 0xFF;         // weight row 11, mid-row
          }
          const Reference ref = ComputeReference(a, b, s.M, s.N, s.K);
          auto out = vt::Tensor::Empty({s.M, s.N}, vt::DType::kF32);
          const int64_t before = mm::F32BitsStreamCalls();
          vt::MatmulFp8(q, out, vt::Tensor::FromHost(a.data(), {s.M, s.K}, vt::DType::kF8E4M3),
                        vt::Tensor::FromHost(b.data(), {s.N, s.K}, vt::DType::kF8E4M3), 0.75f);
          EXPECT_EQ(mm::F32BitsStreamCalls() > before, bits && f32_set);
          const auto got = ToFloats(out);
          for (int64_t i = 0; i < s.M * s.N; ++i) {
            const bool want_nan = nan && (i / s.N == 1 || i % s.N == 5 || i % s.N == 11);
            if (want_nan) {
              EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
            } else {
              const double want = 0.75 * ref.dot[i];
              EXPECT_NEAR(got[i], want, vt_test::MatmulBound(want, ref.mag[i], 0.75, 0.0, s.K, vt::DType::kF32))
                  << "element " << i;
            }
            ++checked;
          }
        }
      }
    }
    _mm_setcsr(csr);
  }
  EXPECT_GT(checked, 0);
}
#endif

// Prepared weights (vt::PrepareWeight, as a model prepares them after loading) take an
// outer-product kernel on a copy laid out once (PackedFp8Kernels) where the level has one:
// the vdpbf16ps level (16-column
// blocks, 4 K values per step) and the AVX2 and AVX-512 F32 levels (8-column blocks). Every
// block/row tail of those layouts (N around multiples of 8 and 16, K around multiples of
// 4, 8, 16 and 64, rows of a around the tiles of 2, 4, 6 and 8 and past 16, where the rows
// go in passes), NaN codes in a and in weight rows, bias and both output dtypes, 1 and 3
// threads, against the float64 reference. The counter and LastGemm show which kernels
// ran: the AVX2 decode cannot keep NaN codes, so a weight holding one is not prepared and
// is multiplied as stored there; a second call finds the copy (the same result bits).
TEST(MatmulFp8, PreparedWeightsWithinBoundOnTheirRelaidOutCopy) {
  namespace mm = vt::cpu::matmul;
  struct RestoreAuto {
    ~RestoreAuto() { vt::cpu::matmul::SetFp8StreamDecode(vt::cpu::matmul::Fp8StreamDecode::kAuto); }
  } restore;
  const std::vector<vt_test::Shape3> shapes = {
      {1, 16, 4},   {1, 17, 5},    {2, 15, 3},    {3, 33, 64},   {4, 47, 65},   {5, 64, 63},   {7, 31, 130},
      {8, 48, 17},  {9, 100, 16},  {12, 1, 1},    {16, 301, 257}, {17, 40, 1000}, {33, 70, 99}, {100, 35, 260},
      {4, 129, 2500}, {1, 200, 4100}, {2, 57, 40}, {2, 300, 50}, {3, 8200, 40}, {16, 4500, 21}};
  std::mt19937 rng(4321);
  const float alpha = 0.031f;
  int checked = 0;
  for (const vt_test::Shape3& s : shapes) {
    auto a = RandomFp8(s.M * s.K, rng);
    auto b = RandomFp8(s.N * s.K, rng);
    const bool nan = s.M == 7 || s.M == 16;   // NaN codes in a
    const bool nan_b = s.M == 16;             // ... and in weight rows
    if (nan) a[2 * s.K + s.K / 2] = 0xFF;     // row 2 of a
    if (nan_b) {
      b[13 * s.K + s.K - 1] = 0x7F;  // weight row 13, last code (a K tail when K % 4 != 0)
      b[(s.N - 1) * s.K] = 0xFF;     // the last weight row (in the last block)
    }
    std::vector<float> bias_f(s.N);
    std::normal_distribution<float> nd(0.0f, 20.0f);
    for (auto& x : bias_f) x = nd(rng);
    const Reference ref = ComputeReference(a, b, s.M, s.N, s.K);
    const auto ta = vt::Tensor::FromHost(a.data(), {s.M, s.K}, vt::DType::kF8E4M3);
    const auto tb = vt::Tensor::FromHost(b.data(), {s.N, s.K}, vt::DType::kF8E4M3);
    tb.SetReadOnly();
    const auto tbias = vt::Tensor::FromHost(bias_f.data(), {s.N}, vt::DType::kF32);
#if defined(__x86_64__)
    // The AVX2 kernel's two decodes, each with the caller's MXCSR as it is and with
    // denormals-are-zero and flush-to-zero set (the queue's threads, created after,
    // inherit it): the f32-bits decode makes subnormal f32 weights, which that would zero.
    for (int mode = 0; mode < 4; ++mode) {
      const auto decode = mode % 2 ? mm::Fp8StreamDecode::kF32Bits : mm::Fp8StreamDecode::kHalf;
      const bool daz = mode >= 2;
      mm::SetFp8StreamDecode(decode);
      const unsigned csr = _mm_getcsr();
      if (daz) _mm_setcsr(csr | 0x8040u);
#else
    for (int mode = 0; mode < 1; ++mode) {
      const bool daz = false;
#endif
      for (vt::CpuIsa isa : vt_test::IsaLevels()) {
#if defined(__x86_64__)
        const bool bf16_packed = isa == vt::CpuIsa::kAvx512Bf16 && __builtin_cpu_supports("avx512vbmi");
        const bool f32_packed = (isa == vt::CpuIsa::kAvx2 || isa == vt::CpuIsa::kAvx512 ||
                                 (isa == vt::CpuIsa::kAvx512Bf16 && !__builtin_cpu_supports("avx512vbmi"))) &&
                                !nan_b;
        const bool packed_level = bf16_packed || f32_packed;
        const char* packed_set = bf16_packed ? "avx512bf16-outer16" : "avx2-outer8";
#else
        const bool bf16_packed = false, packed_level = false;
        const char* packed_set = "";
#endif
        for (int threads : {1, 3}) {
          const vt::Queue q = vt::Queue::Cpu(threads, isa);
          const vt::Tensor pb = vt::PrepareWeight(q, tb, vt::WeightUse::kMatmulB);
          EXPECT_EQ(pb.backend_layout() != nullptr, packed_level);
          for (vt::DType od : {vt::DType::kF32, vt::DType::kBF16}) {
            for (bool with_bias : {false, true}) {
              SCOPED_TRACE(vt::StrCat("M=", s.M, " N=", s.N, " K=", s.K, " isa=", vt::CpuIsaName(q.cpu_isa()),
                                      " threads=", threads, " out=", vt::DTypeName(od), " bias=", with_bias,
                                      " decode mode=", mode, " daz=", daz));
              auto out = vt::Tensor::Empty({s.M, s.N}, od);
              const int64_t before = mm::PackedGemmCalls(), bits_before = mm::F32BitsPackedCalls();
              vt::MatmulFp8(q, out, ta, pb, alpha, with_bias ? &tbias : nullptr);
              EXPECT_EQ(mm::PackedGemmCalls() > before, packed_level);
              EXPECT_EQ(mm::F32BitsPackedCalls() > bits_before, packed_level && !bf16_packed && mode % 2 == 1);
              EXPECT_EQ(mm::LastGemmOnThisThread().packed, packed_level);
              if (packed_level) {
                EXPECT_STREQ(mm::LastGemmOnThisThread().set, packed_set);
              }
              const auto got = ToFloats(out);
              auto bias_at = [&](int64_t i) { return with_bias ? static_cast<double>(bias_f[i % s.N]) : 0.0; };
              auto want = [&](int64_t i) { return static_cast<double>(alpha) * ref.dot[i] + bias_at(i); };
              // Every element is checked; the first five outside the bound are reported.
              int64_t bad = 0;
              for (int64_t i = 0; i < s.M * s.N; ++i) {
                const bool want_nan = (nan && i / s.N == 2) || (nan_b && (i % s.N == 13 || i % s.N == s.N - 1));
                const double tol = vt_test::MatmulBound(want(i), ref.mag[i], alpha, bias_at(i), s.K, od);
                const bool ok = want_nan ? std::isnan(got[i]) : std::fabs(got[i] - want(i)) <= tol;
                if (!ok && bad++ < 5)
                  ADD_FAILURE() << "element " << i << " = " << got[i] << ", want " << (want_nan ? NAN : want(i))
                                << " within " << tol;
                ++checked;
              }
              EXPECT_EQ(bad, 0);
              // Again: the copy is found, and the same kernel gives the same bits.
              auto again = vt::Tensor::Empty({s.M, s.N}, od);
              vt::MatmulFp8(q, again, ta, pb, alpha, with_bias ? &tbias : nullptr);
              const auto got_again = ToFloats(again);
              EXPECT_EQ(0, std::memcmp(got.data(), got_again.data(), got.size() * sizeof(float)));
            }
          }
        }
      }
#if defined(__x86_64__)
      _mm_setcsr(csr);
#endif
    }
  }
  EXPECT_GT(checked, 0);
  if (vt::DetectCpuIsa() < vt::CpuIsa::kAvx512Bf16)
    std::cout << "[ packed fp8 ] no AVX512-BF16 on this processor: its outer-product kernel is compiled, not run\n";
}

// One copy per weight, whatever slices of its rows the model multiplies: slices starting
// on a block of the weight (16 rows at the vdpbf16ps level, 8 at AVX2) read the whole
// weight's copy (a merged q/k/v weight and its shards), named or not; a shard named at
// preparation that starts inside a block gets a copy of its own, made then. Every slice
// gets its own rows right; one starting inside a block that was not named is multiplied
// as stored.
TEST(MatmulFp8, PreparedWeightSlicesShareOneCopy) {
#if defined(__x86_64__)
  namespace mm = vt::cpu::matmul;
  struct Level {
    vt::CpuIsa isa;
    int64_t mid_block;  // a row that is not a block start
  };
  std::vector<Level> levels;
  if (vt::DetectCpuIsa() >= vt::CpuIsa::kAvx512Bf16 && __builtin_cpu_supports("avx512vbmi"))
    levels.push_back({vt::CpuIsa::kAvx512Bf16, 40});
  if (vt::DetectCpuIsa() >= vt::CpuIsa::kAvx2) levels.push_back({vt::CpuIsa::kAvx2, 36});
  if (levels.empty()) GTEST_SKIP() << "no AVX2: no packed kernel to run";
  const int64_t M = 3, N = 72, K = 96;
  std::mt19937 rng(99);
  const auto a = RandomFp8(M * K, rng), b = RandomFp8(N * K, rng);
  const auto ta = vt::Tensor::FromHost(a.data(), {M, K}, vt::DType::kF8E4M3);
  const Reference ref = ComputeReference(a, b, M, N, K);
  for (const Level& level : levels) {
    const vt::Queue q = vt::Queue::Cpu(2, level.isa);
    const int64_t mid = level.mid_block;
    const auto tb = vt::Tensor::FromHost(b.data(), {N, K}, vt::DType::kF8E4M3);
    tb.SetReadOnly();
    // Shards at rows 16 and 48 (block starts: the whole weight's copy only); then shards at
    // `mid` (inside a block: one copy more).
    const std::vector<int64_t> aligned = {0, 16, 48}, unaligned = {0, mid};
    int64_t copies = mm::PackedCopiesMade();
    const vt::Tensor pa = vt::PrepareWeight(q, tb, vt::WeightUse::kMatmulB, aligned);
    EXPECT_EQ(mm::PackedCopiesMade() - copies, 1);
    copies = mm::PackedCopiesMade();
    const vt::Tensor pu = vt::PrepareWeight(q, tb, vt::WeightUse::kMatmulB, unaligned);
    EXPECT_EQ(mm::PackedCopiesMade() - copies, 2);
    struct Case {
      const vt::Tensor* w;
      int64_t n0, n1;
      bool packed;
    };
    for (const Case& c : {Case{&pa, 0, 72, true}, Case{&pa, 16, 48, true}, Case{&pa, 48, 72, true},
                          Case{&pa, 32, 48, true}, Case{&pa, mid, 72, false}, Case{&pu, mid, 72, true},
                          Case{&pu, mid, 60, true}, Case{&pu, 0, mid, true}, Case{&pu, 0, 72, true}}) {
      SCOPED_TRACE(vt::StrCat(vt::CpuIsaName(level.isa), c.w == &pa ? " aligned" : " unaligned", " rows ", c.n0,
                              "..", c.n1));
      copies = mm::PackedCopiesMade();
      const vt::Tensor slice = c.w->Slice(0, c.n0, c.n1);
      auto out = vt::Tensor::Empty({M, c.n1 - c.n0}, vt::DType::kF32);
      vt::MatmulFp8(q, out, ta, slice, 1.0f);
      EXPECT_EQ(mm::LastGemmOnThisThread().packed, c.packed);
      EXPECT_EQ(mm::PackedCopiesMade(), copies);  // none made while multiplying
      const auto got = ToFloats(out);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = c.n0; n < c.n1; ++n) {
          const double want = ref.dot[m * N + n];
          EXPECT_NEAR(got[m * (c.n1 - c.n0) + n - c.n0], want,
                      vt_test::MatmulBound(want, ref.mag[m * N + n], 1.0, 0.0, K, vt::DType::kF32))
              << "m=" << m << " n=" << n;
        }
    }
    // The plain weight, and a prepared one viewed with other rows, are multiplied as stored.
    for (const vt::Tensor& w : {tb, pa.View({N / 2, 2 * K})}) {
      auto out = vt::Tensor::Empty({M, w.dim(0)}, vt::DType::kF32);
      const auto ta2 = w.dim(1) == K ? ta : vt::Tensor::Empty({M, w.dim(1)}, vt::DType::kF8E4M3);
      if (w.dim(1) != K) std::memset(ta2.data(), 0, ta2.nbytes());
      vt::MatmulFp8(q, out, ta2, w, 1.0f);
      EXPECT_FALSE(mm::LastGemmOnThisThread().packed) << w.Describe();
    }
  }
#else
  GTEST_SKIP() << "no packed kernels on this processor";
#endif
}

// PrepareWeight lays out a weight and its shards at once; where the tensor it returns has
// a backend layout, nothing reads the plain bytes again for it and those shards, so
// ReleaseBytes drops them and MatmulFp8 keeps working on the same queue level (whole and
// by shard, within the bound, no new copies), while anything that needs the bytes (another
// level's kernels, data(), copies) throws by name. The tensor it was given keeps them.
TEST(MatmulFp8, PreparedWeightsMultiplyAfterTheirBytesAreReleased) {
  namespace mm = vt::cpu::matmul;
  const int64_t M = 5, N = 72, K = 96;
  std::mt19937 rng(31);
  const auto a = RandomFp8(M * K, rng), b = RandomFp8(N * K, rng);
  const auto ta = vt::Tensor::FromHost(a.data(), {M, K}, vt::DType::kF8E4M3);
  const Reference ref = ComputeReference(a, b, M, N, K);
  const std::vector<int64_t> starts = {0, 16, 40};
  std::vector<vt::CpuIsa> levels;
#if defined(__x86_64__)
  if (vt::DetectCpuIsa() >= vt::CpuIsa::kAvx2) levels = {vt::CpuIsa::kAvx2, vt::CpuIsa::kAvx512, vt::CpuIsa::kAvx512Bf16};
#endif
  int prepared = 0;
  for (vt::CpuIsa isa : levels) {
    const vt::Queue q = vt::Queue::Cpu(2, isa);
    if (q.cpu_isa() != isa) continue;
    SCOPED_TRACE(vt::CpuIsaName(isa));
    const auto tb = vt::Tensor::FromHost(b.data(), {N, K}, vt::DType::kF8E4M3);
    tb.SetReadOnly();
    const int64_t copies_before = mm::PackedCopiesMade();
    const vt::Tensor pb = vt::PrepareWeight(q, tb, vt::WeightUse::kMatmulB, starts);
    ASSERT_NE(pb.backend_layout(), nullptr);
    EXPECT_EQ(pb.data(), tb.data());  // the same bytes, not a copy
    EXPECT_TRUE(pb.read_only());
    EXPECT_EQ(pb.Slice(0, 16, 40).backend_layout(), pb.backend_layout());
    const int64_t copies = mm::PackedCopiesMade() - copies_before;
    EXPECT_GE(copies, 1);
    ASSERT_TRUE(pb.ReleaseBytes());
    EXPECT_TRUE(pb.bytes_released());
    EXPECT_FALSE(tb.bytes_released());
    ++prepared;
    for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, N}, {0, 16}, {16, 40}, {40, N}}) {
      auto out = vt::Tensor::Empty({M, n1 - n0}, vt::DType::kF32);
      vt::MatmulFp8(q, out, ta, n0 == 0 && n1 == N ? pb : pb.Slice(0, n0, n1), 0.5f);
      EXPECT_TRUE(mm::LastGemmOnThisThread().packed);
      const auto got = ToFloats(out);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = n0; n < n1; ++n) {
          const double want = 0.5 * ref.dot[m * N + n];
          EXPECT_NEAR(got[m * (n1 - n0) + n - n0], want,
                      vt_test::MatmulBound(want, ref.mag[m * N + n], 0.5, 0.0, K, vt::DType::kF32))
              << "rows " << n0 << ".." << n1 << " m=" << m << " n=" << n;
        }
    }
    EXPECT_EQ(mm::PackedCopiesMade() - copies_before, copies);  // all made by Prepare
    vt_test::ExpectErrorWith([&] { (void)pb.data(); }, {"[72, 96] F8E4M3", "released"});
    std::vector<uint8_t> host(static_cast<size_t>(N * K));
    vt_test::ExpectErrorWith([&] { pb.CopyToHost(host.data()); }, {"released"});
    auto out = vt::Tensor::Empty({M, N}, vt::DType::kF32);
    vt_test::ExpectErrorWith([&] { vt::MatmulFp8(vt::Queue::Cpu(1, vt::CpuIsa::kScalar), out, ta, pb, 0.5f); },
                             {"MatmulFp8", "released", "scalar"});
    // A slice starting inside a block that was not named has no copy of its own.
    auto out_mid = vt::Tensor::Empty({M, N - 20}, vt::DType::kF32);
    vt_test::ExpectErrorWith([&] { vt::MatmulFp8(q, out_mid, ta, pb.Slice(0, 20, N), 0.5f); },
                             {"MatmulFp8", "released"});
    vt_test::ExpectErrorWith([&] { (void)vt::PrepareWeight(q, pb, vt::WeightUse::kMatmulB); },
                             {"PrepareWeight", "released"});
    tb.CopyToHost(host.data());  // the given tensor's bytes stay
    EXPECT_EQ(host, b);
  }
  if (prepared == 0) std::cout << "[ packed fp8 ] no AVX2: nothing is laid out on this processor\n";

  // Nothing to lay out: the scalar level; the AVX2 decode and a weight with a NaN code.
  auto tb = vt::Tensor::FromHost(b.data(), {N, K}, vt::DType::kF8E4M3);
  tb.SetReadOnly();
  const vt::Tensor same = vt::PrepareWeight(vt::Queue::Cpu(1, vt::CpuIsa::kScalar), tb, vt::WeightUse::kMatmulB, starts);
  EXPECT_EQ(same.backend_layout(), nullptr);
  EXPECT_EQ(same.data(), tb.data());
  auto b_nan = b;
  b_nan[3 * K + 7] = 0x7F;
  const auto tb_nan = vt::Tensor::FromHost(b_nan.data(), {N, K}, vt::DType::kF8E4M3);
  tb_nan.SetReadOnly();
  if (vt::DetectCpuIsa() >= vt::CpuIsa::kAvx2) {
    EXPECT_EQ(vt::PrepareWeight(vt::Queue::Cpu(1, vt::CpuIsa::kAvx2), tb_nan, vt::WeightUse::kMatmulB).backend_layout(),
              nullptr);
    const vt::Tensor prepared = vt::PrepareWeight(vt::Queue::Cpu(1, vt::CpuIsa::kAvx2), tb, vt::WeightUse::kMatmulB);
    EXPECT_NE(prepared.backend_layout(), nullptr);
    vt_test::ExpectErrorWith(
        [&] { (void)vt::PrepareWeight(vt::Queue::Cpu(1, vt::CpuIsa::kAvx2), prepared, vt::WeightUse::kMatmulB); },
        {"PrepareWeight", "already prepared"});
  }
  // Borrowed bytes are not vt's to free; writable weights and bad slices are refused.
  std::vector<uint8_t> borrowed_bytes(b);
  const auto borrowed = vt::Tensor::Borrow(borrowed_bytes.data(), {N, K}, vt::DType::kF8E4M3, vt::Device::Cpu(),
                                           std::make_shared<int>(0));
  borrowed.SetReadOnly();
  EXPECT_FALSE(borrowed.ReleaseBytes());
  EXPECT_FALSE(borrowed.bytes_released());
  const auto writable = vt::Tensor::FromHost(b.data(), {N, K}, vt::DType::kF8E4M3);
  vt_test::ExpectErrorWith([&] { (void)vt::PrepareWeight(vt::Queue::Cpu(1), writable, vt::WeightUse::kMatmulB); },
                           {"PrepareWeight", "read-only"});
  vt_test::ExpectErrorWith([&] { (void)writable.ReleaseBytes(); }, {"ReleaseBytes", "writable"});
  const std::vector<int64_t> bad = {0, 40, 16};
  vt_test::ExpectErrorWith([&] { (void)vt::PrepareWeight(vt::Queue::Cpu(1), tb, vt::WeightUse::kMatmulB, bad); },
                           {"PrepareWeight", "row_starts[2] = 16"});
}

// ---- cuBLASLt oracle --------------------------------------------------------------------

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

// The number after `"key":` in the object of meta.json whose name is `name`.
double MetaNumber(const std::string& meta, const std::string& name, const std::string& key) {
  const size_t at = meta.find("\"" + name + "\"");
  if (at == std::string::npos) throw std::runtime_error("meta.json has no case " + name);
  const size_t k = meta.find("\"" + key + "\"", at);
  const size_t colon = meta.find(':', k);
  if (k == std::string::npos || colon == std::string::npos) throw std::runtime_error("meta.json: no " + key);
  return std::stod(meta.substr(colon + 1));
}

TEST(MatmulFp8, MatchesCublasLtOracle) {
  const std::string dir = std::string(VTLLM_FIXTURES_DIR) + "/oracles/fp8ops/";
  const auto meta_bytes = ReadFile(dir + "meta.json");
  const std::string meta(meta_bytes.begin(), meta_bytes.end());
  const std::vector<vt_test::Shape3> cases = {{1, 256, 512}, {7, 384, 256}, {33, 512, 1024}, {128, 256, 2048}};
  for (const vt_test::Shape3& s : cases) {
    const std::string name = vt::StrCat("gemm_", s.M, "x", s.N, "x", s.K);
    const auto a_raw = ReadFile(dir + name + ".a.u8");
    const auto b_raw = ReadFile(dir + name + ".b.u8");
    const auto ref_raw = ReadFile(dir + name + ".ref64.f32");
    const auto cub_raw = ReadFile(dir + name + ".cublaslt_bf16.f32");
    ASSERT_EQ(a_raw.size(), static_cast<size_t>(s.M * s.K)) << name;
    ASSERT_EQ(b_raw.size(), static_cast<size_t>(s.N * s.K)) << name;
    ASSERT_EQ(ref_raw.size(), static_cast<size_t>(s.M * s.N) * 4) << name;
    ASSERT_EQ(cub_raw.size(), static_cast<size_t>(s.M * s.N) * 4) << name;
    const std::vector<uint8_t> a(a_raw.begin(), a_raw.end()), b(b_raw.begin(), b_raw.end());
    std::vector<float> ref64(s.M * s.N), cublas(s.M * s.N);
    std::memcpy(ref64.data(), ref_raw.data(), ref_raw.size());
    std::memcpy(cublas.data(), cub_raw.data(), cub_raw.size());
    const double scale_a = MetaNumber(meta, name, "scale_a"), scale_b = MetaNumber(meta, name, "scale_b");
    const float alpha = static_cast<float>(scale_a) * static_cast<float>(scale_b);  // folded as a caller does
    const Reference ref = ComputeReference(a, b, s.M, s.N, s.K);
    const auto ta = vt::Tensor::FromHost(a.data(), {s.M, s.K}, vt::DType::kF8E4M3);
    const auto tb = vt::Tensor::FromHost(b.data(), {s.N, s.K}, vt::DType::kF8E4M3);
    for (vt::CpuIsa isa : vt_test::IsaLevels()) {
      const vt::Queue q = vt::Queue::Cpu(2, isa);
      auto out32 = vt::Tensor::Empty({s.M, s.N}, vt::DType::kF32);
      auto out16 = vt::Tensor::Empty({s.M, s.N}, vt::DType::kBF16);
      vt::MatmulFp8(q, out32, ta, tb, alpha);
      vt::MatmulFp8(q, out16, ta, tb, alpha);
      const auto got32 = ToFloats(out32), got16 = ToFloats(out16);
      int bad = 0;
      for (int64_t i = 0; i < s.M * s.N && bad < 5; ++i) {
        // The oracle's float64 reference uses the exact product of the scales and is
        // stored as f32; alpha was rounded to f32 once: 3 more f32 roundings at most.
        const double want = ref64[i];
        const double scale_err = 3.0 * FLT_EPSILON * std::fabs(want);
        const double b32 = vt_test::MatmulBound(want, ref.mag[i], alpha, 0, s.K, vt::DType::kF32) + scale_err;
        const double b16 = vt_test::MatmulBound(want, ref.mag[i], alpha, 0, s.K, vt::DType::kBF16) + scale_err;
        // Ours and cuBLASLt's BF16 each sit within the bound of the exact value; after
        // their roundings they may be one BF16 step apart (2^-7 relative).
        const double bc = std::ldexp(std::fabs(want), -7) + 2.0 * b32;
        bool ok = std::fabs(got32[i] - want) <= b32 && std::fabs(got16[i] - want) <= b16 &&
                  std::fabs(got16[i] - cublas[i]) <= bc;
        if (!ok) {
          ADD_FAILURE() << name << " " << vt::CpuIsaName(isa) << " [" << i / s.N << ", " << i % s.N << "]: f32 "
                        << got32[i] << " bf16 " << got16[i] << " ref64 " << want << " cublaslt " << cublas[i]
                        << " bounds " << b32 << "/" << b16 << "/" << bc;
          ++bad;
        }
      }
    }
  }
}

// ---- validation ---------------------------------------------------------------------

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const vt::Error& e) {
    return e.what();
  }
  return "";
}

TEST(MatmulFp8, RejectsBadOperandsByName) {
  const vt::Queue q = vt::Queue::Cpu(2);
  const auto a = vt::Tensor::Empty({4, 64}, vt::DType::kF8E4M3);
  const auto b = vt::Tensor::Empty({32, 64}, vt::DType::kF8E4M3);
  const auto b_wrong_k = vt::Tensor::Empty({32, 48}, vt::DType::kF8E4M3);
  const auto out = vt::Tensor::Empty({4, 32}, vt::DType::kBF16);

  std::string msg = ErrorOf([&] { vt::MatmulFp8(q, out, a, b_wrong_k, 1.0f); });
  EXPECT_NE(msg.find("MatmulFp8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("48"), std::string::npos) << msg;
  EXPECT_NE(msg.find("K=64"), std::string::npos) << msg;

  const auto a_f32 = vt::Tensor::Empty({4, 64}, vt::DType::kF32);
  msg = ErrorOf([&] { vt::MatmulFp8(q, out, a_f32, b, 1.0f); });
  EXPECT_NE(msg.find("MatmulFp8: a"), std::string::npos) << msg;
  EXPECT_NE(msg.find("F32"), std::string::npos) << msg;

  const auto out_f16 = vt::Tensor::Empty({4, 32}, vt::DType::kF16);
  msg = ErrorOf([&] { vt::MatmulFp8(q, out_f16, a, b, 1.0f); });
  EXPECT_NE(msg.find("MatmulFp8: out"), std::string::npos) << msg;
  EXPECT_NE(msg.find("F16"), std::string::npos) << msg;

  const auto out_shape = vt::Tensor::Empty({4, 31}, vt::DType::kBF16);
  msg = ErrorOf([&] { vt::MatmulFp8(q, out_shape, a, b, 1.0f); });
  EXPECT_NE(msg.find("[4, 31]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 32]"), std::string::npos) << msg;

  const auto bias = vt::Tensor::Empty({31}, vt::DType::kF32);
  msg = ErrorOf([&] { vt::MatmulFp8(q, out, a, b, 1.0f, &bias); });
  EXPECT_NE(msg.find("MatmulFp8: bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[31]"), std::string::npos) << msg;

  const auto bias_i32 = vt::Tensor::Empty({32}, vt::DType::kI32);
  msg = ErrorOf([&] { vt::MatmulFp8(q, out, a, b, 1.0f, &bias_i32); });
  EXPECT_NE(msg.find("I32"), std::string::npos) << msg;

  msg = ErrorOf([&] { vt::MatmulFp8(q, out, a, b, std::nanf("")); });
  EXPECT_NE(msg.find("alpha"), std::string::npos) << msg;
}

}  // namespace
