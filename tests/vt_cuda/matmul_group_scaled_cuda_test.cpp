// MatmulFp8GroupScaled on CUDA (src/vt/cuda/matmul_fp8_group_scaled.cu) against a float64
// reference within the DESIGN bound |out - ref| <= 4·K·FLT_EPSILON·Σ|a·b·s_a·s_b| plus one
// rounding of the output dtype, for each path, with counters proving the path ran:
//  - one row (decode): the GEMV kernel with group scales (128 x 128 blocks, per-channel,
//    a read-only weight loaded before the previous kernel ends);
//  - more rows: cuBLASLt's scaled FP8 GEMM (BLK128x128 / VEC128, and OUTER_VEC for
//    per-channel from K = kLtMinK), including a K whose block count is not a multiple of 4
//    (the weight scales padded); shapes with a partial last block are refused;
//  - the naive kernel, and vt::MatmulFp8GroupScaled's dispatch over all of them.
// Each check prints the largest error as a share of its bound.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "cuda_test_util.h"
#include "vt/cuda/matmul.h"
#include "vt/detail/numerics.h"
#include "vt/ops/quant.h"

namespace {

using vt::DType;

struct Case {
  int64_t M, N, K, bn, bk;
  bool bias = false;
  DType od = DType::kBF16;
};

struct Data {
  std::vector<uint8_t> a, b;
  std::vector<float> sa, sb, bias;
  int64_t G = 0, NB = 0;
};

Data Make(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ex(-9.0f, -3.0f);
  Data d;
  d.G = (c.K + c.bk - 1) / c.bk;
  d.NB = (c.N + c.bn - 1) / c.bn;
  d.a.resize(c.M * c.K);
  d.b.resize(c.N * c.K);
  for (auto& x : d.a) x = vt::numerics::QuantizeFp8(nd(rng) * 40.0f, 1.0f);
  for (auto& x : d.b) x = vt::numerics::QuantizeFp8(nd(rng) * 40.0f, 1.0f);
  d.sa.resize(c.M * d.G);
  d.sb.resize(d.NB * d.G);
  for (auto& x : d.sa) x = std::exp2(ex(rng));
  for (auto& x : d.sb) x = std::exp2(ex(rng));
  d.bias.resize(c.N);
  for (auto& x : d.bias) x = nd(rng);
  return d;
}

using Product = std::function<void(const vt::Queue&, const vt::Tensor& out, const vt::Tensor& a, const vt::Tensor& sa,
                               const vt::Tensor& b, const vt::Tensor& sb, int64_t bn, int64_t bk,
                               const vt::Tensor* bias)>;

// Runs c through run and checks sampled rows (every row up to 64 rows) against float64.
// Returns the largest |error| / bound.
double Check(const vt::Queue& gpu, const Case& c, const Product& run, const std::string& what, bool read_only = false) {
  const Data d = Make(c, static_cast<uint32_t>(c.M * 7 + c.N * 3 + c.K + c.bn));
  vt::Tensor a = vt::Tensor::FromHost(d.a.data(), {c.M, c.K}, DType::kF8E4M3, vtt::kCuda);
  vt::Tensor b = vt::Tensor::FromHost(d.b.data(), {c.N, c.K}, DType::kF8E4M3, vtt::kCuda);
  vt::Tensor sa = vt::Tensor::FromHost(d.sa.data(), {c.M, d.G}, DType::kF32, vtt::kCuda);
  vt::Tensor sb = vt::Tensor::FromHost(d.sb.data(), {d.NB, d.G}, DType::kF32, vtt::kCuda);
  vt::Tensor bias = vt::Tensor::FromHost(d.bias.data(), {c.N}, DType::kF32, vtt::kCuda);
  if (read_only) b.SetReadOnly();
  vt::Tensor out = vt::Tensor::Empty({c.M, c.N}, c.od, vtt::kCuda);
  run(gpu, out, a, sa, b, sb, c.bn, c.bk, c.bias ? &bias : nullptr);
  const std::vector<float> got = vtt::Floats(out);
  const double unit = c.od == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
  const int64_t step = c.M <= 64 ? 1 : c.M / 61;
  double worst = 0.0;
  int bad = 0;
  std::vector<double> bf(d.b.size());
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = vt::Fp8E4M3ToFloat(d.b[i]);
  for (int64_t m = 0; m < c.M; m += step)
    for (int64_t n = 0; n < c.N; ++n) {
      double value = 0.0, mag = 0.0;
      for (int64_t g = 0; g < d.G; ++g) {
        const double s = double(d.sa[m * d.G + g]) * d.sb[(n / c.bn) * d.G + g];
        double t = 0.0, ta = 0.0;
        for (int64_t k = g * c.bk; k < std::min(c.K, (g + 1) * c.bk); ++k) {
          const double p = double(vt::Fp8E4M3ToFloat(d.a[m * c.K + k])) * bf[n * c.K + k];
          t += p;
          ta += std::fabs(p);
        }
        value += t * s;
        mag += ta * std::fabs(s);
      }
      if (c.bias) value += d.bias[n];
      const double acc_bound = 4.0 * c.K * FLT_EPSILON * mag;
      const double bound = acc_bound + (std::fabs(value) + acc_bound) * unit + 1e-30;
      const double err = std::fabs(got[m * c.N + n] - value);
      worst = std::max(worst, err / bound);
      if (!(err <= bound) && bad++ < 3)
        ADD_FAILURE() << what << ": out[" << m << ", " << n << "] = " << got[m * c.N + n] << ", float64 " << value
                      << ", error " << err << " over the bound " << bound;
    }
  std::printf("%-44s M=%-5lld N=%-5lld K=%-5lld blocks %lldx%lld %s%s: largest error %.3f of the bound\n",
              what.c_str(), static_cast<long long>(c.M), static_cast<long long>(c.N), static_cast<long long>(c.K),
              static_cast<long long>(c.bn), static_cast<long long>(c.bk), vt::DTypeName(c.od).data(),
              c.bias ? " +bias" : "", worst);
  return worst;
}

TEST(CudaMatmulFp8GroupScaled, OneRowRunsTheGemvWithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  const Product gemv = [](const vt::Queue& q, const vt::Tensor& o, const vt::Tensor& a, const vt::Tensor& sa,
                      const vt::Tensor& b, const vt::Tensor& sb, int64_t bn, int64_t bk, const vt::Tensor* bias) {
    ASSERT_TRUE(vt::cuda::GroupScaledGemvFits(a, b, bn, bk));
    vt::cuda::MatmulFp8GroupScaledGemv(q, o, a, sa, b, sb, bn, bk, bias);
  };
  const int64_t before = vt::cuda::GroupScaledGemvLaunches();
  int calls = 0;
  for (const auto& [N, K] : {std::pair<int64_t, int64_t>{2048, 1024}, {3072, 1024}, {1024, 3072}, {4096, 4096},
                             {300, 1040}, {12288, 4096}})
    for (bool channel : {false, true}) {
      const int64_t bn = channel ? 1 : 128, bk = channel ? K : 128;
      Check(gpu, {1, N, K, bn, bk, N == 300, N == 1024 ? DType::kF32 : DType::kBF16}, gemv, "gemv");
      ++calls;
    }
  const int64_t early = vt::cuda::GemvEarlyLoadLaunches();
  Check(gpu, {1, 2048, 2048, 128, 128}, gemv, "gemv, read-only weight", true);
  ++calls;
  EXPECT_EQ(vt::cuda::GemvEarlyLoadLaunches() - early, 1) << "the read-only weight's launch did not load early";
  EXPECT_EQ(vt::cuda::GroupScaledGemvLaunches() - before, calls);
  // Not a GEMV: two rows, block_k not a multiple of 16, block_n not a power of two.
  vt::Tensor a2 = vt::Tensor::Empty({2, 1024}, DType::kF8E4M3, vtt::kCuda);
  vt::Tensor a1 = vt::Tensor::Empty({1, 1024}, DType::kF8E4M3, vtt::kCuda);
  vt::Tensor b = vt::Tensor::Empty({256, 1024}, DType::kF8E4M3, vtt::kCuda);
  EXPECT_FALSE(vt::cuda::GroupScaledGemvFits(a2, b, 128, 128));
  EXPECT_FALSE(vt::cuda::GroupScaledGemvFits(a1, b, 128, 100));
  EXPECT_FALSE(vt::cuda::GroupScaledGemvFits(a1, b, 96, 128));
}

TEST(CudaMatmulFp8GroupScaled, CublasLtWithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  int lt = 0, tried = 0;
  const Product run = [&](const vt::Queue& q, const vt::Tensor& o, const vt::Tensor& a, const vt::Tensor& sa,
                      const vt::Tensor& b, const vt::Tensor& sb, int64_t bn, int64_t bk, const vt::Tensor* bias) {
    ++tried;
    if (vt::cuda::MatmulFp8GroupScaledLt(q, o, a, sa, b, sb, bn, bk, bias))
      ++lt;
    else
      vt::cuda::MatmulFp8GroupScaledNaive(q, o, a, sa, b, sb, bn, bk, bias);
  };
  const int64_t before = vt::cuda::GroupScaledLtLaunches();
  for (int64_t M : {2, 16, 64, 300, 2048})
    for (const auto& [N, K] : {std::pair<int64_t, int64_t>{2048, 1024}, {1024, 3072}, {768, 768}, {4096, 2048}}) {
      if (M == 2048 && N * K > 2048 * 1024) continue;  // the float64 reference's time
      Check(gpu, {M, N, K, 128, 128, M == 16, M == 64 ? DType::kF32 : DType::kBF16}, run, "cublaslt blocks");
      if (K >= vt::cuda::kLtMinK) Check(gpu, {M, N, K, 1, K, M == 2}, run, "cublaslt per-channel");
    }
  std::printf("cuBLASLt ran %d of %d products\n", lt, tried);
  {
    // The launch after a scaled cuBLASLt GEMM is not overlapped (CudaQueue::serialize_next),
    // and only that one.
    const Data d = Make({64, 256, 1024, 128, 128}, 5);
    vt::Tensor a = vt::Tensor::FromHost(d.a.data(), {64, 1024}, DType::kF8E4M3, vtt::kCuda);
    vt::Tensor b = vt::Tensor::FromHost(d.b.data(), {256, 1024}, DType::kF8E4M3, vtt::kCuda);
    vt::Tensor sa = vt::Tensor::FromHost(d.sa.data(), {64, d.G}, DType::kF32, vtt::kCuda);
    vt::Tensor sb = vt::Tensor::FromHost(d.sb.data(), {d.NB, d.G}, DType::kF32, vtt::kCuda);
    vt::Tensor out = vt::Tensor::Empty({64, 256}, DType::kBF16, vtt::kCuda);
    ASSERT_TRUE(vt::cuda::MatmulFp8GroupScaledLt(gpu, out, a, sa, b, sb, 128, 128, nullptr));
    EXPECT_TRUE(vt::cuda::NextLaunchSerialized(gpu));
    vt::Tensor codes = vt::Tensor::Empty({64, 256}, DType::kF8E4M3, vtt::kCuda);
    vt::Tensor scales = vt::Tensor::Empty({64, 2}, DType::kF32, vtt::kCuda);
    vt::QuantFp8PerTokenGroup(gpu, codes, scales, out, 128, vt::kFp8BlockAmaxFloor, 0.0f);
    EXPECT_FALSE(vt::cuda::NextLaunchSerialized(gpu));
    gpu.Synchronize();
  }
  // A partial last block of N or K is refused (cuBLASLt left the bound there: the tiny
  // models' 192 columns), and so is K below kLtBlocksMinK (one or two whole blocks, where its
  // in-block tensor-core sums leave the bound); the dispatch's other path is within the bound.
  const int lt_whole = lt;
  for (const auto& [N, K] :
       {std::pair<int64_t, int64_t>{192, 1024}, {1024, 192}, {192, 192}, {256, 128}, {1024, 256}}) {
    Check(gpu, {64, N, K, 128, 128}, run, "cublaslt refused, naive");
    Check(gpu, {64, N, K, 128, 128}, [](const vt::Queue& q, const vt::Tensor& o, const vt::Tensor& a,
                                        const vt::Tensor& sa, const vt::Tensor& b, const vt::Tensor& sb, int64_t bn,
                                        int64_t bk, const vt::Tensor* bias) {
      vt::MatmulFp8GroupScaled(q, o, a, sa, b, sb, bn, bk, bias);
    }, "partial blocks, dispatch");
  }
  EXPECT_EQ(lt, lt_whole);
  EXPECT_EQ(vt::cuda::GroupScaledLtLaunches() - before, lt + 1);  // + the serialization check's product
  EXPECT_GT(lt, tried / 2) << "cuBLASLt offered no scaled FP8 algorithm for most shapes";
}

TEST(CudaMatmulFp8GroupScaled, DispatchAndNaiveWithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  const Product dispatch = [](const vt::Queue& q, const vt::Tensor& o, const vt::Tensor& a, const vt::Tensor& sa,
                          const vt::Tensor& b, const vt::Tensor& sb, int64_t bn, int64_t bk, const vt::Tensor* bias) {
    vt::MatmulFp8GroupScaled(q, o, a, sa, b, sb, bn, bk, bias);
  };
  const Product naive = [](const vt::Queue& q, const vt::Tensor& o, const vt::Tensor& a, const vt::Tensor& sa,
                       const vt::Tensor& b, const vt::Tensor& sb, int64_t bn, int64_t bk, const vt::Tensor* bias) {
    vt::cuda::MatmulFp8GroupScaledNaive(q, o, a, sa, b, sb, bn, bk, bias);
  };
  for (const Case& c : {Case{1, 300, 520, 128, 128, true}, Case{3, 130, 257, 128, 128}, Case{33, 129, 384, 128, 128},
                        Case{1, 2048, 1024, 128, 128}, Case{40, 2048, 1024, 128, 128, true, DType::kF32},
                        Case{5, 300, 1000, 1, 1000}, Case{17, 64, 4096, 1, 4096}, Case{3, 17, 300, 16, 64}}) {
    Check(gpu, c, dispatch, "dispatch");
    Check(gpu, c, naive, "naive");
  }
}

}  // namespace

namespace {

// A serving engine's steps have any number of rows (decode rows plus a prefill chunk): every
// M from 1 to 160 on an 8B-sized projection, and a server's mixed steps past it (1,921 rows:
// one decode row and 15 prompts of 128, which hung cuBLASLt's kernel before the rows past a
// multiple of 4 were taken apart), each checked on a few rows against float64, synchronizing
// after each so that a failing row count is named. The launch counters show the split.
TEST(CudaMatmulFp8GroupScaled, EveryRowCountWithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  constexpr int64_t N = 512, K = 4096, G = K / 128;
  const Case big{2048, N, K, 128, 128};
  const Data d = Make(big, 99);
  vt::Tensor a = vt::Tensor::FromHost(d.a.data(), {big.M, K}, DType::kF8E4M3, vtt::kCuda);
  vt::Tensor b = vt::Tensor::FromHost(d.b.data(), {N, K}, DType::kF8E4M3, vtt::kCuda);
  vt::Tensor sa = vt::Tensor::FromHost(d.sa.data(), {big.M, G}, DType::kF32, vtt::kCuda);
  vt::Tensor sb = vt::Tensor::FromHost(d.sb.data(), {N / 128, G}, DType::kF32, vtt::kCuda);
  std::vector<int64_t> counts;
  for (int64_t M = 1; M <= 160; ++M) counts.push_back(M);
  for (int64_t M : {477, 1921, 1922, 1923, 2047, 2048}) counts.push_back(M);
  for (const int64_t M : counts) {
    std::printf("rows %lld\n", static_cast<long long>(M));
    std::fflush(stdout);
    vt::Tensor out = vt::Tensor::Empty({M, N}, DType::kF32, vtt::kCuda);
    const int64_t lt_before = vt::cuda::GroupScaledLtLaunches(), gemv_before = vt::cuda::GroupScaledGemvLaunches();
    vt::MatmulFp8GroupScaled(gpu, out, a.Slice(0, 0, M), sa.Slice(0, 0, M), b, sb, 128, 128);
    gpu.Synchronize();
    if (M > 160) {  // cuBLASLt over M rounded down to 4, one GEMV per row left
      EXPECT_EQ(vt::cuda::GroupScaledLtLaunches() - lt_before, 1) << "M=" << M;
      EXPECT_EQ(vt::cuda::GroupScaledGemvLaunches() - gemv_before, M % 4) << "M=" << M;
    }
    const std::vector<float> got = vtt::Floats(out);
    for (int64_t m : {int64_t{0}, M / 2, M - 1})
      for (int64_t n : {int64_t{0}, int64_t{129}, N - 1}) {
        double value = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = double(vt::Fp8E4M3ToFloat(d.a[m * K + k])) * vt::Fp8E4M3ToFloat(d.b[n * K + k]) *
                           d.sa[m * G + k / 128] * d.sb[(n / 128) * G + k / 128];
          value += p;
          mag += std::fabs(p);
        }
        const double bound = 4.0 * K * FLT_EPSILON * mag + std::fabs(value) * 0x1p-24 + 1e-30;
        EXPECT_LE(std::fabs(got[m * N + n] - value), bound) << "M=" << M << " out[" << m << ", " << n << "]";
      }
  }
}

}  // namespace
