// Matmul (BF16 x BF16) on prepared weights: on the vdpbf16ps level (AVX-512 BF16 with VBMI)
// vt::PrepareWeight lays a read-only BF16 weight out in the outer-product kernel's 16-column
// blocks (Avx512Bf16PackedBf16Kernels), which Matmul then reads at every M. Checked against a
// float64 reference of the BF16 values: every block and K tail of the layout, rows of a
// around the tiles and past 16, shards, bias and both output dtypes; a row's sums the same
// bits whatever the other rows are; after the plain bytes are released the copy alone is
// read, and F32 activations (which need the plain bytes) get an error naming the op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "elementwise_test_util.h"
#include "matmul_test_util.h"
#include "vt/cpu/matmul/kernels.h"
#include "vt/vt.h"

namespace {

// BF16 bit patterns of normal values N(0, 1) (rounded by truncation: any BF16 value will do).
std::vector<uint16_t> RandomBf16Bits(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) {
    const float f = nd(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    x = static_cast<uint16_t>(u >> 16);
  }
  return v;
}

double Bf16Value(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Reference {
  std::vector<double> dot, mag;
};

Reference Compute(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int64_t M, int64_t N, int64_t K) {
  Reference r{std::vector<double>(static_cast<size_t>(M * N)), std::vector<double>(static_cast<size_t>(M * N))};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double d = 0.0, g = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = Bf16Value(a[m * K + k]) * Bf16Value(b[n * K + k]);
        d += p;
        g += std::fabs(p);
      }
      r.dot[m * N + n] = d;
      r.mag[m * N + n] = g;
    }
  return r;
}

bool PackedBf16Level() {
#if defined(__x86_64__)
  return vt::DetectCpuIsa() >= vt::CpuIsa::kAvx512Bf16 && __builtin_cpu_supports("avx512vbmi");
#else
  return false;
#endif
}

// Every level the machine runs: prepared weights are laid out (and the packed kernel runs,
// LastGemm names it) exactly on the vdpbf16ps level; elsewhere the weight comes back as it
// is. Results within the DESIGN bound of the float64 reference, every element.
TEST(MatmulBf16, PreparedWeightsWithinBoundOnTheirRelaidOutCopy) {
  namespace mm = vt::cpu::matmul;
  const std::vector<vt_test::Shape3> shapes = {
      {1, 16, 4},    {1, 17, 5},   {2, 15, 3},    {3, 33, 64},   {4, 47, 65},  {5, 64, 63},
      {7, 31, 130},  {8, 48, 17},  {9, 100, 16},  {12, 1, 1},    {16, 301, 257}, {17, 40, 1000},
      {33, 70, 99},  {100, 35, 260}, {4, 129, 2500}, {1, 200, 4100}, {16, 520, 21}};
  std::mt19937 rng(2024);
  int checked = 0, packed_runs = 0;
  for (const vt_test::Shape3& s : shapes) {
    const auto a = RandomBf16Bits(s.M * s.K, rng), b = RandomBf16Bits(s.N * s.K, rng);
    std::vector<float> bias_f(static_cast<size_t>(s.N));
    std::normal_distribution<float> nd(0.0f, 5.0f);
    for (auto& x : bias_f) x = nd(rng);
    const Reference ref = Compute(a, b, s.M, s.N, s.K);
    const auto ta = vt::Tensor::FromHost(a.data(), {s.M, s.K}, vt::DType::kBF16);
    const auto tb = vt::Tensor::FromHost(b.data(), {s.N, s.K}, vt::DType::kBF16);
    tb.SetReadOnly();
    const auto tbias = vt::Tensor::FromHost(bias_f.data(), {s.N}, vt::DType::kF32);
    for (vt::CpuIsa isa : vt_test::IsaLevels()) {
      for (int threads : {1, 3}) {
        const vt::Queue q = vt::Queue::Cpu(threads, isa);
        const bool packed = q.cpu_isa() == vt::CpuIsa::kAvx512Bf16 && PackedBf16Level();
        const vt::Tensor pb = vt::PrepareWeight(q, tb, vt::WeightUse::kMatmulB);
        EXPECT_EQ(pb.backend_layout() != nullptr, packed);
        for (vt::DType od : {vt::DType::kF32, vt::DType::kBF16}) {
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE(vt::StrCat("M=", s.M, " N=", s.N, " K=", s.K, " isa=", vt::CpuIsaName(q.cpu_isa()),
                                    " threads=", threads, " out=", vt::DTypeName(od), " bias=", with_bias));
            auto out = vt::Tensor::Empty({s.M, s.N}, od);
            const int64_t before = mm::PackedGemmCalls();
            vt::Matmul(q, out, ta, pb, with_bias ? &tbias : nullptr);
            EXPECT_EQ(mm::PackedGemmCalls() > before, packed);
            EXPECT_EQ(mm::LastGemmOnThisThread().packed, packed);
            if (packed) {
              EXPECT_STREQ(mm::LastGemmOnThisThread().set, "avx512bf16-outer16-bf16");
              ++packed_runs;
            }
            const auto got = vt_test::ToFloats(out);
            int64_t bad = 0;
            for (int64_t i = 0; i < s.M * s.N; ++i) {
              const double bias = with_bias ? bias_f[i % s.N] : 0.0;
              const double want = ref.dot[i] + bias;
              const double tol = vt_test::MatmulBound(want, ref.mag[i], 1.0, bias, s.K, od);
              if (!(std::fabs(got[i] - want) <= tol) && bad++ < 5)
                ADD_FAILURE() << "element " << i << " = " << got[i] << ", want " << want << " within " << tol;
              ++checked;
            }
            EXPECT_EQ(bad, 0);
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
  if (PackedBf16Level()) {
    EXPECT_GT(packed_runs, 0);
  }
}

// One row of a gives the same bits alone as among 16 or 40 others (the packed kernel's sums
// per output lane never depend on the other rows), and a shard named at preparation, whole
// or inside a block, multiplies from the copies PrepareWeight made.
TEST(MatmulBf16, PreparedRowsAndShardsIndependentOfTheirNeighbours) {
  if (!PackedBf16Level()) GTEST_SKIP() << "no AVX-512 BF16 with VBMI: BF16 weights are not laid out here";
  namespace mm = vt::cpu::matmul;
  const int64_t N = 72, K = 200;
  std::mt19937 rng(7);
  const auto a = RandomBf16Bits(40 * K, rng), b = RandomBf16Bits(N * K, rng);
  const auto tb = vt::Tensor::FromHost(b.data(), {N, K}, vt::DType::kBF16);
  tb.SetReadOnly();
  const vt::Queue q = vt::Queue::Cpu(2, vt::CpuIsa::kAvx512Bf16);
  const vt::Tensor pb = vt::PrepareWeight(q, tb, vt::WeightUse::kMatmulB, std::vector<int64_t>{0, 20, 48});
  ASSERT_NE(pb.backend_layout(), nullptr);
  auto row_of = [&](int64_t M, int64_t n0, int64_t n1) {
    const auto ta = vt::Tensor::FromHost(a.data(), {M, K}, vt::DType::kBF16);
    auto out = vt::Tensor::Empty({M, n1 - n0}, vt::DType::kF32);
    vt::Matmul(q, out, ta, n0 == 0 && n1 == N ? pb : pb.Slice(0, n0, n1));
    EXPECT_TRUE(mm::LastGemmOnThisThread().packed) << "M=" << M << " rows " << n0 << ".." << n1;
    auto got = vt_test::ToFloats(out);
    got.resize(static_cast<size_t>(n1 - n0));  // row 0
    return got;
  };
  const auto alone = row_of(1, 0, N);
  EXPECT_EQ(row_of(16, 0, N), alone);
  EXPECT_EQ(row_of(40, 0, N), alone);
  const Reference ref = Compute(a, b, 1, N, K);
  for (auto [n0, n1] : {std::pair<int64_t, int64_t>{20, 48}, {48, N}, {0, 20}}) {
    const auto got = row_of(3, n0, n1);
    for (int64_t n = n0; n < n1; ++n)
      EXPECT_NEAR(got[n - n0], ref.dot[n], vt_test::MatmulBound(ref.dot[n], ref.mag[n], 1.0, 0.0, K, vt::DType::kF32))
          << "rows " << n0 << ".." << n1 << " n=" << n;
  }
}

// With the plain bytes released, Matmul reads the copy alone (BF16 activations, the level
// it was laid out for); F32 activations or another level need the plain bytes and get an
// error naming Matmul and the release.
TEST(MatmulBf16, PreparedWeightsMultiplyAfterTheirBytesAreReleased) {
  if (!PackedBf16Level()) GTEST_SKIP() << "no AVX-512 BF16 with VBMI: BF16 weights are not laid out here";
  namespace mm = vt::cpu::matmul;
  const int64_t M = 5, N = 40, K = 96;
  std::mt19937 rng(11);
  const auto a = RandomBf16Bits(M * K, rng), b = RandomBf16Bits(N * K, rng);
  const Reference ref = Compute(a, b, M, N, K);
  const auto ta = vt::Tensor::FromHost(a.data(), {M, K}, vt::DType::kBF16);
  const auto tb = vt::Tensor::FromHost(b.data(), {N, K}, vt::DType::kBF16);
  tb.SetReadOnly();
  const vt::Queue q = vt::Queue::Cpu(2, vt::CpuIsa::kAvx512Bf16);
  const vt::Tensor pb = vt::PrepareWeight(q, tb, vt::WeightUse::kMatmulB);
  ASSERT_NE(pb.backend_layout(), nullptr);
  ASSERT_TRUE(pb.ReleaseBytes());
  EXPECT_FALSE(tb.bytes_released());
  auto out = vt::Tensor::Empty({M, N}, vt::DType::kF32);
  vt::Matmul(q, out, ta, pb);
  EXPECT_TRUE(mm::LastGemmOnThisThread().packed);
  const auto got = vt_test::ToFloats(out);
  for (int64_t i = 0; i < M * N; ++i)
    EXPECT_NEAR(got[i], ref.dot[i], vt_test::MatmulBound(ref.dot[i], ref.mag[i], 1.0, 0.0, K, vt::DType::kF32))
        << "element " << i;
  std::vector<float> af(static_cast<size_t>(M * K));
  for (size_t i = 0; i < af.size(); ++i) af[i] = static_cast<float>(Bf16Value(a[i]));
  const auto ta32 = vt::Tensor::FromHost(af.data(), {M, K}, vt::DType::kF32);
  vt_test::ExpectErrorWith([&] { vt::Matmul(q, out, ta32, pb); }, {"Matmul", "released", "[40, 96] BF16"});
  vt_test::ExpectErrorWith([&] { vt::Matmul(vt::Queue::Cpu(1, vt::CpuIsa::kAvx2), out, ta, pb); },
                           {"Matmul", "released", "avx2"});
}

}  // namespace
