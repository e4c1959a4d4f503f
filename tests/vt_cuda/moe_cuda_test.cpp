// The CUDA MoE ops (src/vt/cuda/moe.cu) beyond the op table's cases: routing at the shape of
// Qwen3-30B-A3B (128 experts, top 8) over more tokens than one CTA holds, byte for byte
// with the CPU kernel; and an expert id outside [0, E), which the kernel cannot throw for
// (no host synchronization inside the op), recorded and reported at the next
// synchronization by name.
#include <random>

#include "cuda_test_util.h"
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

}  // namespace
