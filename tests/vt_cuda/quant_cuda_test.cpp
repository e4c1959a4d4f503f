// QuantFp8Static on CUDA: byte-identical to PyTorch's float8_e4m3fn cast (oracle files).
// Byte identity with the CPU kernels (random values at many scales, constructed ties,
// saturation, subnormals, signed zeros, NaN, every BF16 and F16 bit pattern) is the op
// table's check (tests/vt/op_table_test.cpp).
#include <fstream>

#include "cuda_test_util.h"

namespace {

using vt::DType;

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
