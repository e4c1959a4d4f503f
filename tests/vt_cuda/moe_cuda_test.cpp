// The CUDA MoE ops (src/vt/cuda/moe.cu) beyond the op table's cases: routing at the shape of
// Qwen3-30B-A3B (128 experts, top 8) over more tokens than one CTA holds, byte for byte
// with the CPU kernel; and an expert id outside [0, E), which the kernel cannot throw for
// (no host synchronization inside the op), recorded and reported at the next
// synchronization by name; and which kernel the FP8 expert ops ran: the down GEMV
// (moe_gemv.cuh) for up to 16 tokens, the per-pair kernels beyond (the op table compares
// both with the CPU's reference over its shapes; here a Qwen3-30B-A3B-wide call).
#include <algorithm>
#include <cmath>
#include <random>

#include "cuda_test_util.h"
#include "vt/cuda/kernels.h"
#include "vt/detail/numerics.h"
#include "vt/ops/moe.h"

namespace {

using vt::DType;

TEST(CudaMoe, RoutingAt128ExpertsEqualsCpuBytes) {
  VT_REQUIRE_CUDA();
  constexpr int64_t T = 37, E = 128, k = 8;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> l(static_cast<size_t>(T * E));
  for (auto& v : l) v = nd(rng);
  for (int64_t i = 0; i < E; i += 3) l[5 * E + i] = l[5 * E];  // a row of ties
  const vt::Tensor logits = vt::Tensor::FromHost(l.data(), {T, E}, DType::kF32);
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  for (bool renorm : {true, false}) {
    const vt::Tensor ids_c = vt::Tensor::Empty({T, k}, DType::kI32), w_c = vt::Tensor::Empty({T, k}, DType::kF32);
    vt::MoeTopKRouting(cpu, ids_c, w_c, logits, renorm);
    const vt::Tensor ids_g = vt::Tensor::Empty({T, k}, DType::kI32, vtt::kCuda);
    const vt::Tensor w_g = vt::Tensor::Empty({T, k}, DType::kF32, vtt::kCuda);
    const int64_t before = vt::DispatchCount(vt::OpId::kMoeTopKRouting, vt::DeviceType::kCUDA);
    vt::MoeTopKRouting(gpu, ids_g, w_g, logits.To(vtt::kCuda), renorm);
    EXPECT_GT(vt::DispatchCount(vt::OpId::kMoeTopKRouting, vt::DeviceType::kCUDA), before);
    EXPECT_TRUE(vtt::SameBytes(ids_g, ids_c)) << "renormalize " << renorm;
    EXPECT_TRUE(vtt::SameBytes(w_g, w_c)) << "renormalize " << renorm;
  }
}

TEST(CudaMoe, ExpertIdOutsideRangeIsReported) {
  VT_REQUIRE_CUDA();
  constexpr int64_t T = 2, H = 16, I = 8, E = 4, k = 2;
  vt::Queue gpu = vt::Queue::Cuda(0);
  const std::vector<float> zeros(static_cast<size_t>(E * 2 * I * H), 0.0f);
  const vt::Tensor x = vtt::HostTensor(std::vector<float>(T * H, 1.0f), DType::kBF16, {T, H}).To(vtt::kCuda);
  const vt::Tensor w13 = vtt::HostTensor(zeros, DType::kBF16, {E * 2 * I, H}).To(vtt::kCuda);
  const vt::Tensor w2 =
      vtt::HostTensor(std::vector<float>(E * H * I, 0.0f), DType::kBF16, {E * H, I}).To(vtt::kCuda);
  const std::vector<int32_t> ids = {0, 1, 2, 9};
  const std::vector<float> w = {0.5f, 0.5f, 0.5f, 0.5f};
  const vt::Tensor out = vt::Tensor::Empty({T, H}, DType::kBF16, vtt::kCuda);
  try {
    vt::MoeExperts(gpu, out, x, vt::Tensor::FromHost(ids.data(), {T, k}, DType::kI32, vtt::kCuda),
                   vt::Tensor::FromHost(w.data(), {T, k}, DType::kF32, vtt::kCuda), w13, w2);
    gpu.Synchronize();
    ADD_FAILURE() << "expert id 9 of 4 accepted";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert id 9 (ids element 3) is outside [0, 4)"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(gpu.Synchronize());  // reported once; the queue keeps serving
}

// FP8 codes of N(0, 1) values.
vt::Tensor Fp8Codes(const vt::Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  vt::Tensor t = vt::Tensor::Empty(shape, DType::kF8E4M3);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<uint8_t>()[i] = vt::numerics::QuantizeFp8(nd(rng), 1.0f);
  return t;
}

TEST(CudaMoe, FewTokenFp8CallsRunTheDownGemv) {
  VT_REQUIRE_CUDA();
  constexpr int64_t H = 2048, I = 768, E = 12, k = 8;
  const vt::Tensor w13 = Fp8Codes({E * 2 * I, H}, 3), w2 = Fp8Codes({E * H, I}, 4);
  std::vector<float> al13, al2;
  for (int64_t e = 0; e < E; ++e) {
    // gate/up sums near N(0, 1), activations in e4m3fn's normal range (scale 0.05)
    al13.push_back((1.0f + 0.1f * float(e)) / std::sqrt(float(H)));
    al2.push_back((1.0f + 0.05f * float(e)) / std::sqrt(float(I)));
  }
  const vt::Tensor a13 = vt::Tensor::FromHost(al13.data(), {E}, DType::kF32);
  const vt::Tensor a2 = vt::Tensor::FromHost(al2.data(), {E}, DType::kF32);
  const vt::Tensor w13_g = w13.To(vtt::kCuda), w2_g = w2.To(vtt::kCuda);
  const vt::Tensor a13_g = a13.To(vtt::kCuda), a2_g = a2.To(vtt::kCuda);
  vt::Queue cpu = vt::Queue::Cpu(2), gpu = vt::Queue::Cuda(0);
  std::mt19937 rng(5);
  for (int64_t T : {1, 16, 17}) {
    const vt::Tensor x8 = Fp8Codes({T, H}, 10 + static_cast<uint32_t>(T));
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
    const vt::Tensor want = vt::Tensor::Empty({T, H}, DType::kF32);
    vt::MoeExpertsFp8(cpu, want, x8, ids_t, w_t, w13, a13, w2, 0.05f, a2);
    const vt::Tensor got = vt::Tensor::Empty({T, H}, DType::kF32, vtt::kCuda);
    const int64_t before = vt::cuda::MoeGemvLaunches();
    vt::MoeExpertsFp8(gpu, got, x8.To(vtt::kCuda), ids_t.To(vtt::kCuda), w_t.To(vtt::kCuda), w13_g, a13_g, w2_g,
                      0.05f, a2_g);
    EXPECT_EQ(vt::cuda::MoeGemvLaunches() - before, T <= 16 ? 1 : 0) << T << " tokens";
    const vt::Tensor g = got.To(vt::Device::Cpu());
    double max_want = 0.0, max_diff = 0.0;
    for (int64_t i = 0; i < T * H; ++i) {
      max_want = std::max(max_want, std::fabs(double(want.data_as<float>()[i])));
      max_diff = std::max(max_diff, std::fabs(double(g.data_as<float>()[i]) - double(want.data_as<float>()[i])));
    }
    // An activation one e4m3fn step off moves an output by 2^-3 of one of its k·I terms: far
    // below 2^-6 of the largest output; a wrong row, slot or scale is not.
    EXPECT_GT(max_want, 0.0);
    EXPECT_LE(max_diff, 0x1p-6 * max_want) << T << " tokens";
  }
}

}  // namespace
