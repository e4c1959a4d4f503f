// The CUDA MoeExpertsFp8GroupScaled (src/vt/cuda/moe_group_scaled.cu) beyond the op table's
// cases: that its kernels ran (their launch counters; these shapes take 16-byte vectors), against the CPU kernel at the width of
// Qwen3-30B-A3B's experts (H = 2048, I = 768, k = 8) and of one whose I ends partway through
// a 128-block (I = 704), block and per-channel scales, 1 and 40 tokens, F32 and BF16 out; and
// a bad expert id reported at the next synchronization.
#include <algorithm>
#include <cmath>
#include <random>

#include "cuda_test_util.h"
#include "vt/cuda/kernels.h"
#include "vt/detail/numerics.h"
#include "vt/ops/moe.h"
#include "vt/ops/quant.h"

namespace {

using vt::DType;

vt::Tensor Fp8Codes(const vt::Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  vt::Tensor t = vt::Tensor::Empty(shape, DType::kF8E4M3);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<uint8_t>()[i] = vt::numerics::QuantizeFp8(nd(rng), 1.0f);
  return t;
}

vt::Tensor Scales(int64_t rows, int64_t cols, float around, uint32_t seed) {
  std::mt19937 rng(seed);
  vt::Tensor t = vt::Tensor::Empty({rows, cols}, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data_as<float>()[i] = around * std::uniform_real_distribution<float>(0.5f, 2.0f)(rng);
  return t;
}

TEST(CudaMoeGroupScaled, WideExpertsMatchTheCpuKernel) {
  VT_REQUIRE_CUDA();
  constexpr int64_t H = 2048, E = 12, k = 8;
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  std::mt19937 rng(7);
  for (int64_t I : {768, 704})
    for (bool channel : {false, true}) {
      const int64_t bn = channel ? 1 : 128, bk = channel ? H : 128;
      const int64_t nI = (I + bn - 1) / bn, nH = (H + bn - 1) / bn, GH = (H + bk - 1) / bk, GI = (I + bk - 1) / bk;
      const float af = channel ? 0.0f : vt::kFp8BlockAmaxFloor, sf = channel ? vt::kFp8PerTokenScaleFloor : 0.0f;
      const vt::Tensor w13 = Fp8Codes({E * 2 * I, H}, 3), w2 = Fp8Codes({E * H, I}, 4);
      const vt::Tensor s13 = Scales(E * 2 * nI, GH, 1.0f / std::sqrt(float(H)), 5);
      const vt::Tensor s2 = Scales(E * nH, GI, 1.0f / std::sqrt(float(I)), 6);
      const vt::Tensor w13_g = w13.To(vtt::kCuda), w2_g = w2.To(vtt::kCuda), s13_g = s13.To(vtt::kCuda),
                       s2_g = s2.To(vtt::kCuda);
      for (int64_t T : {1, 40})
        for (DType od : {DType::kF32, DType::kBF16}) {
          const vt::Tensor x8 = Fp8Codes({T, H}, 10 + static_cast<uint32_t>(T));
          const vt::Tensor sx = Scales(T, GH, 0.05f, 11);
          std::vector<int32_t> ids;
          std::vector<float> w;
          for (int64_t t = 0; t < T; ++t) {
            std::vector<int32_t> all(E);
            for (int64_t e = 0; e < E; ++e) all[e] = static_cast<int32_t>(e);
            std::shuffle(all.begin(), all.end(), rng);
            for (int64_t j = 0; j < k; ++j) {
              ids.push_back(all[j]);
              w.push_back(std::uniform_real_distribution<float>(0.05f, 0.3f)(rng));
            }
          }
          const vt::Tensor ids_t = vt::Tensor::FromHost(ids.data(), {T, k}, DType::kI32);
          const vt::Tensor w_t = vt::Tensor::FromHost(w.data(), {T, k}, DType::kF32);
          const vt::Tensor want = vt::Tensor::Empty({T, H}, od);
          vt::MoeExpertsFp8GroupScaled(cpu, want, x8, sx, ids_t, w_t, w13, s13, w2, s2, bn, bk, af, sf);
          const vt::Tensor got = vt::Tensor::Empty({T, H}, od, vtt::kCuda);
          const int64_t before = vt::cuda::MoeGroupScaledLaunches();
          const int64_t vectors_before = vt::cuda::MoeGroupScaledVectorLaunches();
          vt::MoeExpertsFp8GroupScaled(gpu, got, x8.To(vtt::kCuda), sx.To(vtt::kCuda), ids_t.To(vtt::kCuda),
                                       w_t.To(vtt::kCuda), w13_g, s13_g, w2_g, s2_g, bn, bk, af, sf);
          gpu.Synchronize();
          EXPECT_EQ(vt::cuda::MoeGroupScaledLaunches() - before, 1);
          EXPECT_EQ(vt::cuda::MoeGroupScaledVectorLaunches() - vectors_before, 1);  // rows of 16-byte vectors
          const vt::Tensor g = got.To(vt::Device::Cpu());
          auto at = [od](const vt::Tensor& t, int64_t i) {
            return od == DType::kF32 ? double(t.data_as<float>()[i]) : double(vt::Bf16ToFloat(t.data_as<uint16_t>()[i]));
          };
          double max_want = 0.0, max_diff = 0.0;
          for (int64_t i = 0; i < T * H; ++i) {
            max_want = std::max(max_want, std::fabs(at(want, i)));
            max_diff = std::max(max_diff, std::fabs(at(g, i) - at(want, i)));
          }
          // An activation one e4m3fn step off moves an output by 2^-3 of one of its k·I
          // terms: far below 2^-6 of the largest output; a wrong row, slot or scale is not.
          EXPECT_GT(max_want, 0.0);
          EXPECT_LE(max_diff, 0x1p-6 * max_want)
              << "I=" << I << (channel ? " per-channel " : " blocks ") << T << " tokens " << vt::DTypeName(od);
        }
    }
}

TEST(CudaMoeGroupScaled, ExpertIdOutsideRangeIsReported) {
  VT_REQUIRE_CUDA();
  constexpr int64_t T = 2, H = 16, I = 8, E = 4, k = 2;
  vt::Queue gpu = vt::Queue::Cuda(0);
  const vt::Tensor x8 = Fp8Codes({T, H}, 1).To(vtt::kCuda);
  const vt::Tensor sx = Scales(T, 1, 1.0f, 2).To(vtt::kCuda);
  const vt::Tensor w13 = Fp8Codes({E * 2 * I, H}, 3).To(vtt::kCuda), w2 = Fp8Codes({E * H, I}, 4).To(vtt::kCuda);
  const vt::Tensor s13 = Scales(E * 2 * I, 1, 1.0f, 5).To(vtt::kCuda), s2 = Scales(E * H, 1, 1.0f, 6).To(vtt::kCuda);
  const std::vector<int32_t> ids = {0, 1, 2, 9};
  const std::vector<float> w = {0.5f, 0.5f, 0.5f, 0.5f};
  const vt::Tensor out = vt::Tensor::Empty({T, H}, DType::kBF16, vtt::kCuda);
  try {
    vt::MoeExpertsFp8GroupScaled(gpu, out, x8, sx, vt::Tensor::FromHost(ids.data(), {T, k}, DType::kI32, vtt::kCuda),
                                 vt::Tensor::FromHost(w.data(), {T, k}, DType::kF32, vtt::kCuda), w13, s13, w2, s2, 1,
                                 H, 0.0f, vt::kFp8PerTokenScaleFloor);
    gpu.Synchronize();
    ADD_FAILURE() << "expert id 9 of 4 accepted";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert id 9 (ids element 3) is outside [0, 4)"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(gpu.Synchronize());
}

}  // namespace
