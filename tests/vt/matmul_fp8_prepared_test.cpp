// MatmulFp8 on prepared weights (vt::PrepareWeight, the re-laid-out copy a model makes after
// loading) against a float64 reference computed from the e4m3fn format: every block and row
// tail of the packed layouts, slices of one prepared weight sharing its copy, and
// multiplication after the plain bytes are released.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
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

// Prepared weights (vt::PrepareWeight, as a model prepares them after loading) take an
// outer-product kernel on a copy laid out once (PackedKernels) where the level has one:
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
#if defined(__x86_64__)
              const int64_t panels_before = mm::Avx2PanelGemms();
#endif
              vt::MatmulFp8(q, out, ta, pb, alpha, with_bias ? &tbias : nullptr);
              EXPECT_EQ(mm::PackedGemmCalls() > before, packed_level);
#if defined(__x86_64__)
              // Past a few rows the AVX2 kernel reads weights decoded once into panels (one
              // thread: its call has every row; more may split the rows).
              if (threads == 1) {
                EXPECT_EQ(mm::Avx2PanelGemms() > panels_before,
                          packed_level && !bf16_packed && s.M >= mm::kAvx2PanelMinRows);
              }
#endif
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
#if defined(__x86_64__)
  if (vt::DetectCpuIsa() < vt::CpuIsa::kAvx512Bf16)
    std::cout << "[ packed fp8 ] no AVX512-BF16 on this processor: its outer-product kernel is compiled, not run\n";
#else
  std::cout << "[ packed fp8 ] no outer-product kernel in this build: weights are multiplied as stored\n";
#endif
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
#if defined(__x86_64__)
  if (vt::DetectCpuIsa() >= vt::CpuIsa::kAvx2) {
    EXPECT_EQ(vt::PrepareWeight(vt::Queue::Cpu(1, vt::CpuIsa::kAvx2), tb_nan, vt::WeightUse::kMatmulB).backend_layout(),
              nullptr);
    const vt::Tensor prepared = vt::PrepareWeight(vt::Queue::Cpu(1, vt::CpuIsa::kAvx2), tb, vt::WeightUse::kMatmulB);
    EXPECT_NE(prepared.backend_layout(), nullptr);
    vt_test::ExpectErrorWith(
        [&] { (void)vt::PrepareWeight(vt::Queue::Cpu(1, vt::CpuIsa::kAvx2), prepared, vt::WeightUse::kMatmulB); },
        {"PrepareWeight", "already prepared"});
  }
#endif
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

}  // namespace
