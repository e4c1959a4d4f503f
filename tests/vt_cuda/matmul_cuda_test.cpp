// MatmulFp8 and Matmul on CUDA against a float64 reference within the DESIGN bound
// |out - ref| <= 4·K·FLT_EPSILON·|alpha|·Σ|a·b| plus one rounding of the output dtype, for
// each kernel variant (small-M streaming, split-K, GEMV, cuBLASLt, naive) and around their
// crossover; and
// close to torch._scaled_mm (cuBLASLt) outputs in the oracle files.
#include <cfloat>
#include <cmath>
#include <fstream>
#include <functional>
#include <random>

#include "cuda_test_util.h"
#include "vt/cuda/matmul.h"

namespace {

using vt::DType;

std::vector<uint8_t> RandomFp8(size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(0, 255);
  std::vector<uint8_t> v(n);
  for (auto& b : v) {
    do b = static_cast<uint8_t>(d(rng));
    while ((b & 0x7F) == 0x7F);  // no NaN codes
  }
  return v;
}

struct Ref {
  std::vector<double> value, abs_sum;  // alpha·Σ a·b (+bias) and |alpha|·Σ|a·b|
};

Ref Reference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int64_t M, int64_t N, int64_t K,
              float alpha, const std::vector<float>* bias) {
  Ref r;
  r.value.resize(M * N);
  r.abs_sum.resize(M * N);
  std::vector<double> af(a.size()), bf(b.size());
  for (size_t i = 0; i < a.size(); ++i) af[i] = vt::Fp8E4M3ToFloat(a[i]);
  for (size_t i = 0; i < b.size(); ++i) bf[i] = vt::Fp8E4M3ToFloat(b[i]);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, sa = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = af[m * K + k] * bf[n * K + k];
        s += p;
        sa += std::fabs(p);
      }
      r.value[m * N + n] = alpha * s + (bias ? (*bias)[n] : 0.0);
      r.abs_sum[m * N + n] = std::fabs(alpha) * sa;
    }
  return r;
}

// Checks out against ref within the DESIGN bound; returns the number of violations.
int CheckBound(const vt::Tensor& out, const Ref& ref, int64_t K, const std::string& what) {
  const auto got = vtt::Floats(out);
  const double unit = out.dtype() == DType::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double acc_bound = 4.0 * K * FLT_EPSILON * ref.abs_sum[i];
    const double bound = acc_bound + (std::fabs(ref.value[i]) + acc_bound) * unit + 1e-30;
    const double err = std::fabs(got[i] - ref.value[i]);
    if (!(err <= bound)) {
      if (bad++ < 3)
        ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " ref " << ref.value[i] << " err " << err
                      << " bound " << bound;
    }
  }
  return bad;
}

using Variant = std::function<void(const vt::Queue&, const vt::Tensor&, const vt::Tensor&, const vt::Tensor&, float,
                                   const vt::Tensor*)>;

void RunCase(const vt::Queue& gpu, const Variant& run, const std::string& name, int64_t M, int64_t N, int64_t K,
             DType od, bool with_bias, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto a = RandomFp8(M * K, rng), b = RandomFp8(N * K, rng);
  const float alpha = 0.0123f / static_cast<float>(std::sqrt(static_cast<double>(K)));
  std::vector<float> bias(N);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (auto& x : bias) x = nd(rng);
  const Ref ref = Reference(a, b, M, N, K, alpha, with_bias ? &bias : nullptr);
  vt::Tensor at = vt::Tensor::FromHost(a.data(), {M, K}, DType::kF8E4M3, vtt::kCuda);
  vt::Tensor bt = vt::Tensor::FromHost(b.data(), {N, K}, DType::kF8E4M3, vtt::kCuda);
  vt::Tensor biast = vt::Tensor::FromHost(bias.data(), {N}, DType::kF32, vtt::kCuda);
  vt::Tensor out = vt::Tensor::Empty({M, N}, od, vtt::kCuda);
  run(gpu, out, at, bt, alpha, with_bias ? &biast : nullptr);
  const std::string what = name + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                           " " + std::string(vt::DTypeName(od)) + (with_bias ? " +bias" : "");
  EXPECT_EQ(CheckBound(out, ref, K, what), 0) << what;
}

TEST(CudaMatmulFp8, DispatchWithinBoundAroundCrossover) {
  VT_REQUIRE_CUDA();
  ASSERT_TRUE(vt::OpRegistered(vt::OpId::kMatmulFp8, vt::DeviceType::kCUDA));
  vt::Queue gpu = vt::Queue::Cuda(0);
  const int64_t c = vt::cuda::kSmallMMax;
  Variant dispatch = [](const vt::Queue& q, const vt::Tensor& o, const vt::Tensor& a, const vt::Tensor& b, float al,
                        const vt::Tensor* bias) { vt::MatmulFp8(q, o, a, b, al, bias); };
  const int64_t before = vt::DispatchCount(vt::OpId::kMatmulFp8, vt::DeviceType::kCUDA);
  int runs = 0;
  const int64_t k_lt = vt::cuda::kLtMinK;
  for (int64_t M : {int64_t{1}, c, c + 1, 2 * c + 1, int64_t{16}, int64_t{64}}) {
    for (DType od : {DType::kBF16, DType::kF32}) {
      // Below and at the K where cuBLASLt takes over for M > kSmallMMax.
      RunCase(gpu, dispatch, "dispatch", M, 264, 512, od, false, 100 + static_cast<uint32_t>(M));
      RunCase(gpu, dispatch, "dispatch", M, 256, k_lt, od, true, 200 + static_cast<uint32_t>(M));
      RunCase(gpu, dispatch, "dispatch", M, 128, 2 * k_lt, od, false, 300 + static_cast<uint32_t>(M));
      runs += 3;
    }
  }
  EXPECT_EQ(vt::DispatchCount(vt::OpId::kMatmulFp8, vt::DeviceType::kCUDA), before + runs);
}

TEST(CudaMatmulFp8, SmallMKernelWithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  for (int64_t M : {1, 2, 3, 4, 5, 8, 9, 16, 17})
    for (int64_t N : {1, 7, 256, 1000})
      for (int64_t K : {16, 48, 528, 4096})
        RunCase(gpu, vt::cuda::MatmulFp8Small, "small-M", M, N, K, M % 2 ? DType::kBF16 : DType::kF32, N == 7,
                static_cast<uint32_t>(M * 131 + N * 7 + K));
}

// The persistent GEMV kernel: K across its tunings (and partial last vectors), N from
// below one group of rows to more rows than one wave holds in groups.
TEST(CudaMatmulFp8, GemvKernelWithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  int fitted = 0;
  Variant gemv = [&](const vt::Queue& q, const vt::Tensor& o, const vt::Tensor& a, const vt::Tensor& b, float al,
                     const vt::Tensor* bias) {
    fitted += vt::cuda::GemvFits(a, b);  // else it would fall back to split-K and test that instead
    vt::cuda::MatmulFp8Gemv(q, o, a, b, al, bias);
  };
  int cases = 0;
  for (int64_t K : {vt::cuda::kGemvMinK, int64_t{2064}, int64_t{3072}, int64_t{4096}, int64_t{4112}, int64_t{8208},
                    int64_t{12288}, vt::cuda::kGemvMaxK})
    for (int64_t N : {1, 2, 7, 9, 13, 264, 1000, 4100}) {
      RunCase(gpu, gemv, "gemv", 1, N, K, N % 2 ? DType::kBF16 : DType::kF32, N == 7 || N == 1000,
              static_cast<uint32_t>(N * 11 + K));
      ++cases;
    }
  RunCase(gpu, gemv, "gemv", 1, 20000, 4096, DType::kBF16, true, 77);
  ++cases;
  EXPECT_EQ(fitted, cases);
  // Outside its range it hands over to split-K (and says so).
  vt::Tensor a = vt::Tensor::Empty({1, vt::cuda::kGemvMinK - 16}, DType::kF8E4M3, vtt::kCuda);
  vt::Tensor b = vt::Tensor::Empty({4, vt::cuda::kGemvMinK - 16}, DType::kF8E4M3, vtt::kCuda);
  EXPECT_FALSE(vt::cuda::GemvFits(a, b));
  RunCase(gpu, vt::cuda::MatmulFp8Gemv, "gemv->split-K", 1, 300, vt::cuda::kGemvMaxK + 16, DType::kBF16, false, 78);
}

// The overlapped GEMV launch starts before the previous kernel finishes: when that kernel
// writes the weight and the activation the GEMV reads, the GEMV must still see the new
// values. A quantizer kernel rewrites b and a right before each product (same stream);
// each product must match the reference of the values just written, not the previous ones.
// Rounds 2 and 3 mark b read-only once written (as a model does with its weights), so the
// GEMV loads b before the quantizer of a ends (counted), while a must still be the new a.
TEST(CudaMatmulFp8, OverlappedGemvSeesThePreviousKernelsWrites) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  const int64_t N = 3000, K = 4096;
  vt::Tensor at = vt::Tensor::Empty({1, K}, DType::kF8E4M3, vtt::kCuda);
  vt::Tensor out = vt::Tensor::Empty({1, N}, DType::kF32, vtt::kCuda);
  std::mt19937 rng(5);
  for (int round = 0; round < 4; ++round) {
    vt::Tensor bt = vt::Tensor::Empty({N, K}, DType::kF8E4M3, vtt::kCuda);
    // Values exactly representable in e4m3, so quantizing with scale 1 reproduces them.
    const auto a8 = RandomFp8(K, rng), b8 = RandomFp8(N * K, rng);
    std::vector<float> af(K), bf(N * K);
    for (int64_t i = 0; i < K; ++i) af[i] = vt::Fp8E4M3ToFloat(a8[i]);
    for (int64_t i = 0; i < N * K; ++i) bf[i] = vt::Fp8E4M3ToFloat(b8[i]);
    vt::Tensor af_t = vt::Tensor::FromHost(af.data(), {1, K}, DType::kF32, vtt::kCuda);
    vt::Tensor bf_t = vt::Tensor::FromHost(bf.data(), {N, K}, DType::kF32, vtt::kCuda);
    const bool read_only = round >= 2;
    if (round == 0) {
      vt::QuantFp8Static(gpu, bt, bf_t, 1.0f);
      vt::QuantFp8Static(gpu, at, af_t, 1.0f);  // a: written by the kernel right before the GEMV
    } else if (round == 1) {
      vt::QuantFp8Static(gpu, at, af_t, 1.0f);
      vt::QuantFp8Static(gpu, bt, bf_t, 1.0f);  // b, whose head the GEMV prefetches early
    } else {
      vt::QuantFp8Static(gpu, bt, bf_t, 1.0f);
      bt.SetReadOnly();
      vt::QuantFp8Static(gpu, at, af_t, 1.0f);  // a, right before the GEMV that loads b early
    }
    EXPECT_EQ(bt.read_only(), read_only);
    const int64_t early0 = vt::cuda::GemvEarlyLoadLaunches();
    if (round == 3)
      vt::MatmulFp8(gpu, out, at, bt, 0.01f);  // the op as models call it picks the same launch
    else
      vt::cuda::MatmulFp8Gemv(gpu, out, at, bt, 0.01f, nullptr);
    EXPECT_EQ(vt::cuda::GemvEarlyLoadLaunches() - early0, read_only ? 1 : 0) << "round " << round;
    const Ref ref = Reference(a8, b8, 1, N, K, 0.01f, nullptr);
    EXPECT_EQ(CheckBound(out, ref, K, "overlapped gemv round " + std::to_string(round)), 0);
  }
}

// Every instantiated GEMV tuning, on the K it covers (full and partial last vectors).
TEST(CudaMatmulFp8, GemvVariantsWithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  ASSERT_GT(vt::cuda::GemvVariantCount(), 0);
  const int64_t early0 = vt::cuda::GemvEarlyLoadLaunches();
  int64_t early_asked = 0;
  for (int v = 0; v < vt::cuda::GemvVariantCount(); ++v) {
    int ran = 0;
    for (int64_t K : {int64_t{1024}, int64_t{1040}, int64_t{2048}, int64_t{3072}, int64_t{4096}, int64_t{4112},
                      int64_t{8192}, int64_t{12288}, int64_t{12304}, int64_t{16384}}) {
      if (K > vt::cuda::GemvVariantMaxK(v)) continue;
      Variant run = [&](const vt::Queue& q, const vt::Tensor& o, const vt::Tensor& a, const vt::Tensor& b, float al,
                        const vt::Tensor* bias) {
        // Each launch mode in turn (the weight is copied from the host, never written by a
        // kernel, so loading it early is allowed whether or not it is marked read-only).
        const vt::cuda::GemvLaunch launches[] = {vt::cuda::kGemvDefaultLaunch, vt::cuda::kGemvReadOnlyLaunch,
                                                 vt::cuda::GemvLaunch{}, vt::cuda::GemvLaunch{true, 16u << 10, true}};
        const vt::cuda::GemvLaunch how = launches[(v + ran) % 4];
        early_asked += how.early_weight_loads;
        EXPECT_TRUE(vt::cuda::MatmulFp8GemvVariant(q, o, a, b, al, bias, v, how));
      };
      for (int64_t N : {3, 37, 1000}) {
        RunCase(gpu, run, vt::cuda::GemvVariantName(v), 1, N, K, N == 37 ? DType::kF32 : DType::kBF16, N == 3,
                static_cast<uint32_t>(v * 1000 + N + K));
        ++ran;
      }
    }
    EXPECT_GT(ran, 0) << vt::cuda::GemvVariantName(v) << " covered no K";
  }
  // Every launch that asked for early loads made them (the kernels are built for sm_90).
  EXPECT_GT(early_asked, 0);
  EXPECT_EQ(vt::cuda::GemvEarlyLoadLaunches() - early0, early_asked);
}

TEST(CudaMatmulFp8, SplitKKernelWithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  for (int64_t M : {1, 2, 3, 4, 5, 8, 9, 16, 17})
    for (int64_t N : {1, 7, 13, 256, 1000, 4100})
      for (int64_t K : {16, 48, 528, 4096, 8208})
        RunCase(gpu, vt::cuda::MatmulFp8SplitK, "split-K", M, N, K, M % 2 ? DType::kBF16 : DType::kF32, N == 7,
                static_cast<uint32_t>(M * 137 + N * 5 + K));
}

// The BF16 route MatmulFp8 takes for M >= kViaBf16MinM and K < kLtMinK.
TEST(CudaMatmulFp8, ViaBf16WithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  int ran = 0;
  for (int64_t M : {int64_t{2}, vt::cuda::kViaBf16MinM, int64_t{64}, int64_t{300}})
    for (int64_t N : {7, 256, 1000})
      for (int64_t K : {16, 528, 1001, 1024, 2032}) {  // 1001: widened by Cast, not the vector kernel
        Variant run = [&](const vt::Queue& q, const vt::Tensor& o, const vt::Tensor& a, const vt::Tensor& b, float al,
                          const vt::Tensor* bias) { ran += vt::cuda::MatmulFp8ViaBf16(q, o, a, b, al, bias); };
        RunCase(gpu, run, "via-bf16", M, N, K, N == 256 ? DType::kF32 : DType::kBF16, N == 7,
                static_cast<uint32_t>(M * 31 + N * 3 + K));
      }
  EXPECT_EQ(ran, 4 * 3 * 5);  // cuBLASLt had an algorithm every time: the route itself ran
}

// cuBLASLt FP8 where MatmulFp8 uses it (K >= kLtMinK).
TEST(CudaMatmulFp8, CublasLtWithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  int ran = 0;
  for (int64_t M : {1, 4, 5, 16, 17, 64, 200})
    for (int64_t N : {256, 1024})
      for (int64_t K : {vt::cuda::kLtMinK, int64_t{4096}, int64_t{6160}})
        for (DType od : {DType::kBF16, DType::kF32}) {
          Variant lt = [&](const vt::Queue& q, const vt::Tensor& o, const vt::Tensor& a, const vt::Tensor& b, float al,
                           const vt::Tensor* bias) {
            if (vt::cuda::MatmulFp8Lt(q, o, a, b, al, bias)) ++ran;
            else vt::cuda::MatmulFp8Naive(q, o, a, b, al, bias);
          };
          RunCase(gpu, lt, "cublaslt", M, N, K, od, M == 17, static_cast<uint32_t>(M + N + K));
        }
  EXPECT_GT(ran, 0) << "cuBLASLt offered no FP8 algorithm for any shape";
}

TEST(CudaMatmulFp8, NaiveAndUnalignedKWithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  for (int64_t K : {1, 3, 40, 100}) {
    RunCase(gpu, vt::cuda::MatmulFp8Naive, "naive", 3, 65, K, DType::kBF16, true, static_cast<uint32_t>(K));
    Variant dispatch = [](const vt::Queue& q, const vt::Tensor& o, const vt::Tensor& a, const vt::Tensor& b, float al,
                          const vt::Tensor* bias) { vt::MatmulFp8(q, o, a, b, al, bias); };
    RunCase(gpu, dispatch, "dispatch unaligned K", 33, 65, K, DType::kF32, false, static_cast<uint32_t>(K) + 9);
  }
}

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// torch._scaled_mm oracles: our BF16 output within the bound of the float64 reference, and
// within one BF16 ulp (plus the bound) of cuBLASLt's output as PyTorch produced it.
TEST(CudaMatmulFp8, CloseToTorchScaledMmOracle) {
  VT_REQUIRE_CUDA();
  struct Case {
    int64_t M, N, K;
    double sa, sb;
  };
  const Case cases[] = {{1, 256, 512, 0.012684670276939869, 0.0004876184684690088},
                        {7, 384, 256, 0.01652016118168831, 0.000506391457747668},
                        {33, 512, 1024, 0.02148631401360035, 0.0005193818942643702},
                        {128, 256, 2048, 0.02188040316104889, 0.0005258359014987946}};  // meta.json
  vt::Queue gpu = vt::Queue::Cuda(0);
  for (const auto& c : cases) {
    const std::string base = vtt::FixturesDir() + "/oracles/fp8ops/gemm_" + std::to_string(c.M) + "x" +
                             std::to_string(c.N) + "x" + std::to_string(c.K);
    const auto a = ReadFile(base + ".a.u8"), b = ReadFile(base + ".b.u8");
    const auto peer = ReadFile(base + ".cublaslt_bf16.f32");
    ASSERT_EQ(a.size(), static_cast<size_t>(c.M * c.K)) << base;
    ASSERT_EQ(b.size(), static_cast<size_t>(c.N * c.K)) << base;
    ASSERT_EQ(peer.size(), static_cast<size_t>(c.M * c.N * 4)) << base;
    const float alpha = static_cast<float>(static_cast<float>(c.sa) * static_cast<float>(c.sb));
    std::vector<uint8_t> au(a.begin(), a.end()), bu(b.begin(), b.end());
    const Ref ref = Reference(au, bu, c.M, c.N, c.K, alpha, nullptr);
    vt::Tensor at = vt::Tensor::FromHost(au.data(), {c.M, c.K}, DType::kF8E4M3, vtt::kCuda);
    vt::Tensor bt = vt::Tensor::FromHost(bu.data(), {c.N, c.K}, DType::kF8E4M3, vtt::kCuda);
    vt::Tensor out = vt::Tensor::Empty({c.M, c.N}, DType::kBF16, vtt::kCuda);
    vt::MatmulFp8(gpu, out, at, bt, alpha);
    EXPECT_EQ(CheckBound(out, ref, c.K, base), 0);
    const auto got = vtt::Floats(out);
    const float* pv = reinterpret_cast<const float*>(peer.data());
    int far = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double tol = 4.0 * c.K * FLT_EPSILON * ref.abs_sum[i] + std::fabs(ref.value[i]) * std::ldexp(1.0, -7);
      if (std::fabs(got[i] - pv[i]) > tol + 1e-30 && far++ < 3)
        ADD_FAILURE() << base << " element " << i << ": ours " << got[i] << " torch._scaled_mm " << pv[i];
    }
    EXPECT_EQ(far, 0) << base;
  }
}

// vt::Matmul of random a [M, K] (dtype ad) and b [N, K] (bd) into od on the GPU, checked
// against a float64 product of the stored values within the DESIGN bound.
void CheckMatmul(const vt::Queue& gpu, int64_t M, int64_t N, int64_t K, DType ad, DType bd, DType od, bool with_bias,
                 std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> av(M * K), bv(N * K), bias(N);
  for (auto& x : av) x = nd(rng);
  for (auto& x : bv) x = nd(rng);
  for (auto& x : bias) x = nd(rng);
  vt::Tensor a = vtt::HostTensor(av, ad, {M, K}), b = vtt::HostTensor(bv, bd, {N, K});
  const auto ar = vtt::Floats(a), br = vtt::Floats(b);  // the values actually stored
  vt::Tensor biast = vtt::HostTensor(bias, DType::kBF16, {N}).To(vtt::kCuda);
  const auto bb = vtt::Floats(biast);
  Ref ref;
  ref.value.resize(M * N);
  ref.abs_sum.resize(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, sa = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(ar[m * K + k]) * br[n * K + k];
        s += p;
        sa += std::fabs(p);
      }
      ref.value[m * N + n] = s + (with_bias ? bb[n] : 0.0);
      ref.abs_sum[m * N + n] = sa + (with_bias ? std::fabs(bb[n]) : 0.0);
    }
  vt::Tensor out = vt::Tensor::Empty({M, N}, od, vtt::kCuda);
  vt::Matmul(gpu, out, a.To(vtt::kCuda), b.To(vtt::kCuda), with_bias ? &biast : nullptr);
  const std::string what = "Matmul M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                           " " + std::string(vt::DTypeName(ad)) + "x" + std::string(vt::DTypeName(bd)) + "->" +
                           std::string(vt::DTypeName(od)) + (with_bias ? " +bias" : "");
  EXPECT_EQ(CheckBound(out, ref, K + 1, what), 0) << what;
}

TEST(CudaMatmul, Bf16AndF32WithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  std::mt19937 rng(5);
  const int64_t before = vt::DispatchCount(vt::OpId::kMatmul, vt::DeviceType::kCUDA);
  int runs = 0;
  for (int64_t M : {1, 5, 64})
    for (int64_t K : {3, 64, 1000})
      for (DType ad : {DType::kBF16, DType::kF32})
        for (DType bd : {DType::kBF16, DType::kF32})
          for (DType od : {DType::kBF16, DType::kF32}) {
            CheckMatmul(gpu, M, 96, K, ad, bd, od, K == 64, rng);
            ++runs;
          }
  EXPECT_EQ(vt::DispatchCount(vt::OpId::kMatmul, vt::DeviceType::kCUDA), before + runs);
}

// BF16 decode products (M = 1) run the GEMV kernel from kBf16GemvMinK to kBf16GemvMaxK
// (K across its tunings, N from below a group of rows to more than a wave holds), and
// cuBLASLt outside that range or for an F16 output.
TEST(CudaMatmul, Bf16DecodeProductsRunTheGemvWithinBound) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  std::mt19937 rng(6);
  const int64_t k_min = vt::cuda::kBf16GemvMinK, k_max = vt::cuda::kBf16GemvMaxK;
  int gemv_runs = 0;
  const int64_t before = vt::cuda::Bf16GemvLaunches();
  for (int64_t K : {k_min, int64_t{1000}, int64_t{2048}, int64_t{3072}, int64_t{4104}, k_max})
    for (int64_t N : {1, 3, 9, 264, 4100}) {
      CheckMatmul(gpu, 1, N, K, DType::kBF16, DType::kBF16, N % 2 ? DType::kBF16 : DType::kF32, N == 9, rng);
      ++gemv_runs;
    }
  CheckMatmul(gpu, 1, 20000, 1024, DType::kBF16, DType::kBF16, DType::kBF16, true, rng);
  ++gemv_runs;
  EXPECT_EQ(vt::cuda::Bf16GemvLaunches() - before, gemv_runs);
  // Outside the range, two rows, or mixed dtypes: not the GEMV.
  const int64_t mid = vt::cuda::Bf16GemvLaunches();
  CheckMatmul(gpu, 1, 64, k_min - 8, DType::kBF16, DType::kBF16, DType::kF32, false, rng);
  CheckMatmul(gpu, 1, 64, k_max + 8, DType::kBF16, DType::kBF16, DType::kF32, false, rng);
  CheckMatmul(gpu, 2, 64, 1024, DType::kBF16, DType::kBF16, DType::kF32, false, rng);
  CheckMatmul(gpu, 1, 64, 1024, DType::kF32, DType::kBF16, DType::kF32, false, rng);
  EXPECT_EQ(vt::cuda::Bf16GemvLaunches(), mid);
}

// MatmulFp8SiluMulQuantFp8 of one row takes the GEMV with gate/up row pairs and SiLU-mul +
// quantization in its epilogue (counted), for K across the GEMV's tunings up to the 8B down
// projection's width and I from 1 up; it gives the bytes of MatmulFp8 into BF16 then
// SiluMulQuantFp8 (both outputs), and its codes equal the CPU quantizer's of the same
// products. Two rows or K outside the GEMV's range run the two ops instead (not counted),
// with the same bytes.
TEST(CudaMatmul, SiluMulQuantInTheGemvEpilogueGivesTheSequencesBytes) {
  VT_REQUIRE_CUDA();
  vt::Queue gpu = vt::Queue::Cuda(0);
  const vt::Queue cpu = vt::Queue::Cpu(1);
  uint32_t seed = 40;
  int fused_runs = 0;
  const int64_t before = vt::cuda::SiluMulQuantGemvLaunches();
  // e4m3 codes of n normal values (scale 1): products of order sqrt(K).
  auto normal_codes = [&](int64_t rows, int64_t cols) {
    const vt::Tensor v = vtt::HostTensor(vtt::Normal(static_cast<size_t>(rows * cols), ++seed), DType::kF32, {rows, cols});
    const vt::Tensor c = vt::Tensor::Empty({rows, cols}, DType::kF8E4M3);
    vt::QuantFp8Static(cpu, c, v, 1.0f);
    return c.To(vtt::kCuda);
  };
  auto silu = [&](int64_t M, int64_t I, int64_t K, bool expect_fused) {
    const std::string what = vt::StrCat("MatmulFp8SiluMulQuantFp8 ", M, "x", 2 * I, "x", K);
    const float scale = 0.0173f;
    const float alpha = 2.0f / std::sqrt(static_cast<float>(K));  // products of a few units
    const vt::Tensor x8 = normal_codes(M, K), w = normal_codes(2 * I, K);
    const vt::Tensor out8 = vt::Tensor::Empty({M, I}, DType::kF8E4M3, vtt::kCuda);
    const vt::Tensor gate_up = vt::Tensor::Empty({M, 2 * I}, DType::kBF16, vtt::kCuda);
    const vt::Tensor out8_two = vt::Tensor::Empty({M, I}, DType::kF8E4M3, vtt::kCuda);
    const vt::Tensor gate_up_two = vt::Tensor::Empty({M, 2 * I}, DType::kBF16, vtt::kCuda);
    const vt::Tensor out8_cpu = vt::Tensor::Empty({M, I}, DType::kF8E4M3);
    const int64_t launches = vt::cuda::SiluMulQuantGemvLaunches();
    vt::MatmulFp8SiluMulQuantFp8(gpu, out8, gate_up, x8, w, alpha, scale);
    vt::MatmulFp8(gpu, gate_up_two, x8, w, alpha);
    vt::SiluMulQuantFp8(gpu, out8_two, gate_up_two, scale);
    gpu.Synchronize();
    vt::SiluMulQuantFp8(cpu, out8_cpu, gate_up.To(vt::Device::Cpu()), scale);
    EXPECT_EQ(vt::cuda::SiluMulQuantGemvLaunches() - launches, expect_fused ? 1 : 0) << what;
    fused_runs += expect_fused ? 1 : 0;
    EXPECT_EQ(vtt::Bytes(gate_up), vtt::Bytes(gate_up_two)) << what << ": products";
    EXPECT_EQ(vtt::Bytes(out8), vtt::Bytes(out8_two)) << what << ": codes";
    EXPECT_EQ(vtt::Bytes(out8), vtt::Bytes(out8_cpu)) << what << ": codes against the CPU's of the same products";
    // Codes neither mostly saturated nor mostly zero: the comparisons see real codes.
    const std::vector<uint8_t> codes = vtt::Bytes(out8);
    int64_t extreme = 0;
    for (uint8_t c : codes) extreme += (c & 0x7F) == 0x7E || (c & 0x7F) == 0;
    EXPECT_LE(extreme, static_cast<int64_t>(codes.size()) / 4 + 1) << what;
  };
  for (int64_t K : {int64_t{1024}, int64_t{2048}, int64_t{3072}, int64_t{4096}, int64_t{12288}, int64_t{16384}})
    for (int64_t I : {int64_t{1}, int64_t{3}, int64_t{130}, int64_t{3072}}) silu(1, I, K, true);
  silu(2, 64, 2048, false);
  silu(1, 64, 1008, false);
  silu(1, 64, 16400, false);
  EXPECT_EQ(vt::cuda::SiluMulQuantGemvLaunches() - before, fused_runs);
  EXPECT_EQ(fused_runs, 24);
}

}  // namespace
