// QuantFp8Static on CUDA: byte-identical to the CPU kernel over random values at many
// scales, constructed ties, saturation, subnormals, signed zeros, NaN, every BF16 and F16
// bit pattern; and to PyTorch's float8_e4m3fn cast (oracle files).
#include <cmath>
#include <fstream>
#include <limits>
#include <random>

#include "cuda_test_util.h"

namespace {

using vt::DType;

// Runs the quantizer on the CPU and on CUDA and compares the bytes; checks that the CUDA
// kernel really ran.
void ExpectCpuEqualsCuda(const vt::Tensor& x_cpu, float scale, const std::string& what) {
  vt::Queue cpu = vt::Queue::Cpu();
  vt::Queue gpu = vt::Queue::Cuda(0);
  vt::Tensor ref = vt::Tensor::Empty(x_cpu.shape(), DType::kF8E4M3);
  vt::QuantFp8Static(cpu, ref, x_cpu, scale);
  vt::Tensor x = x_cpu.To(vtt::kCuda);
  vt::Tensor out = vt::Tensor::Empty(x_cpu.shape(), DType::kF8E4M3, vtt::kCuda);
  const int64_t before = vt::DispatchCount(vt::OpId::kQuantFp8Static, vt::DeviceType::kCUDA);
  vt::QuantFp8Static(gpu, out, x, scale);
  gpu.Synchronize();
  EXPECT_EQ(vt::DispatchCount(vt::OpId::kQuantFp8Static, vt::DeviceType::kCUDA), before + 1);
  EXPECT_TRUE(vtt::SameBytes(out, ref)) << what << " scale=" << scale << " dtype=" << vt::DTypeName(x_cpu.dtype());
}

std::vector<float> SpecialValues(float scale) {
  std::vector<float> v;
  // Midpoints between adjacent e4m3 magnitudes, times the scale: ties that separate
  // reciprocal-multiply from divide and RNE from other roundings.
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = vt::Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    const float hi = vt::Fp8E4M3ToFloat(static_cast<uint8_t>(c + 1));
    for (float s : {1.0f, -1.0f}) {
      v.push_back(s * (lo + hi) * 0.5f * scale);
      v.push_back(s * lo * scale);
      v.push_back(std::nextafter(s * (lo + hi) * 0.5f * scale, 0.0f));
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float m : {448.0f, 449.0f, 463.9f, 464.0f, 464.1f, 480.0f, 1e6f, 3e38f})
    for (float s : {1.0f, -1.0f}) v.push_back(s * m * scale);
  for (float x : {inf, -inf, 0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(),
                  -std::numeric_limits<float>::quiet_NaN(), 1e-40f, -1e-40f, 1e-45f, std::ldexp(1.0f, -10) * scale,
                  std::ldexp(3.0f, -11) * scale, std::ldexp(1.0f, -11) * scale})
    v.push_back(x);
  for (int k = 0; k <= 20; ++k) v.push_back(static_cast<float>(k) * std::ldexp(1.0f, -10) * scale);
  return v;
}

TEST(CudaQuant, RandomManyScalesAllInputDtypes) {
  VT_REQUIRE_CUDA();
  std::mt19937 rng(7);
  for (float scale : {1e-4f, 0.0092f, 0.13f, 0.77f, 1.0f, 3.3f, 250.0f}) {
    for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
      const int64_t n = 4097;  // odd: no vector-width assumptions
      std::vector<float> v(n);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::uniform_real_distribution<float> ex(-12.0f, 10.0f);
      for (auto& x : v) x = nd(rng) * std::exp2(ex(rng)) * scale;
      ExpectCpuEqualsCuda(vtt::HostTensor(v, d, {n}), scale, "random");
    }
  }
}

TEST(CudaQuant, TiesSaturationSubnormalsZerosNaN) {
  VT_REQUIRE_CUDA();
  for (float scale : {0.0092f, 0.13f, 0.77f, 1.0f}) {
    const auto v = SpecialValues(scale);
    for (DType d : {DType::kF32, DType::kBF16, DType::kF16})
      ExpectCpuEqualsCuda(vtt::HostTensor(v, d, {static_cast<int64_t>(v.size())}), scale, "specials");
  }
}

TEST(CudaQuant, EveryBf16AndF16BitPattern) {
  VT_REQUIRE_CUDA();
  for (DType d : {DType::kBF16, DType::kF16}) {
    vt::Tensor x = vt::Tensor::Empty({256, 256}, d);
    for (int i = 0; i < 65536; ++i) x.data_as<uint16_t>()[i] = static_cast<uint16_t>(i);
    for (float scale : {0.0092f, 0.13f, 0.77f, 1.0f, 1e-3f}) ExpectCpuEqualsCuda(x, scale, "all bit patterns");
  }
}

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// PyTorch's bytes: (x * inv).clamp(-448, 448).to(float8_e4m3fn), inv = 1/scale in f32.
TEST(CudaQuant, MatchesPyTorchOracle) {
  VT_REQUIRE_CUDA();
  const float scales[] = {1.0f, 0.0092f, 0.13f, 0.77f, 0.0025f, 17.0f, 0.5f};  // meta.json
  vt::Queue gpu = vt::Queue::Cuda(0);
  int cases = 0;
  for (int s = 0; s < 7; ++s) {
    for (int x = 0; x < 4; ++x) {
      const std::string base = vtt::FixturesDir() + "/oracles/fp8ops/quant_s" + std::to_string(s) + "_x" +
                               std::to_string(x);
      const auto xs = ReadFile(base + ".x.f32");
      const auto qs = ReadFile(base + ".q.u8");
      if (xs.empty()) continue;
      ASSERT_EQ(xs.size(), qs.size() * 4) << base;
      const int64_t n = static_cast<int64_t>(qs.size());
      vt::Tensor xt = vt::Tensor::FromHost(xs.data(), {n}, DType::kF32, vtt::kCuda);
      vt::Tensor out = vt::Tensor::Empty({n}, DType::kF8E4M3, vtt::kCuda);
      vt::QuantFp8Static(gpu, out, xt, scales[s]);
      const auto got = vtt::Bytes(out);
      int diffs = 0;
      for (int64_t i = 0; i < n; ++i) diffs += got[i] != static_cast<uint8_t>(qs[i]);
      EXPECT_EQ(diffs, 0) << base;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 28) << "oracle files missing under " << vtt::FixturesDir();
}

}  // namespace
