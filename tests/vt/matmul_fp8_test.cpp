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

using vt_test::ComputeReference;
using vt_test::Fp8Values;
using vt_test::RandomFp8;
using vt_test::Reference;
using vt_test::ToFloats;

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
                                                    {vt::CpuIsa::kAmx, "amx-bf16"},
                                                    {vt::CpuIsa::kNeon, "neon-f32"},
                                                    {vt::CpuIsa::kNeonBf16, "neonbf16-bfmmla"}};
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
#if defined(__x86_64__)
  if (vt::DetectCpuIsa() != vt::CpuIsa::kAmx)
    std::cout << "[ AMX ] not on this processor: the AMX path is compiled here, not run\n";
#endif
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
