// Tensor parallelism on CUDA with NCCL: the model split over 2 (and 4) GPUs against the same
// model on one, on the fixtures the CPU tests use (tests/model/tensor_parallel_test.cpp).
// Fewer GPUs than the split needs: SKIPPED. Run with NCCL_NVLS_ENABLE=0 on shared hosts.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "model/model_oracle.h"
#include "vt/comm.h"
#include "vt/vt.h"

namespace vtllm::model {
namespace {

std::string Fixture(const std::string& rel) { return std::string(VTLLM_FIXTURES_DIR) + "/" + rel; }

LoadOptions CudaOptions(vt::DType dtype, int tp) {
  LoadOptions o;
  o.device = vt::Device::Cuda(0);
  o.dtype = dtype;
  o.progress = false;
  o.tensor_parallel_size = tp;
  return o;
}

std::vector<int32_t> Prompt(int64_t vocab, int len) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(static_cast<int32_t>((i * 37 + len * 11 + 3) % vocab));
  return p;
}

void CompareSplit(const std::string& dir, int n) {
  if (vt::CudaDeviceCount() < n) GTEST_SKIP() << "needs " << n << " CUDA devices, " << vt::CudaDeviceCount() << " visible";
  SCOPED_TRACE(dir + " tp=" + std::to_string(n));
  auto whole = Model::Load(dir, CudaOptions(vt::DType::kF32, 1));
  auto split = Model::Load(dir, CudaOptions(vt::DType::kF32, n));
  ASSERT_EQ(split->tensor_parallel_size(), n);
  ASSERT_STREQ(split->communicator()->kind(), "nccl");
  double worst = 0, scale = 0;
  for (int len : {1, 7, 21}) {
    const auto prompt = Prompt(whole->vocab_size(), len);
    const testing::LogitError e =
        testing::CompareLogits(testing::PromptLogits(*split, prompt), testing::PromptLogits(*whole, prompt));
    worst = std::max(worst, e.max_abs);
    scale = std::max(scale, e.ref_max_abs);
    EXPECT_EQ(testing::GreedyTokens(*split, prompt, 8), testing::GreedyTokens(*whole, prompt, 8));
  }
  std::printf("  tp=%d f32 on CUDA: max |logit diff| %.3g (max |logit| %.3g)\n", n, worst, scale);
  EXPECT_LE(worst, 1e-4 * std::max(scale, 1.0));
}

TEST(TensorParallelCuda, Qwen3TwoGpusEqualOne) { CompareSplit(Fixture("oracles/qwen3-tiny/bf16"), 2); }
TEST(TensorParallelCuda, Qwen3FourGpusEqualOne) { CompareSplit(Fixture("oracles/qwen3-tiny/bf16"), 4); }
TEST(TensorParallelCuda, MqaReplicatedKvHeadsTwoGpus) { CompareSplit(Fixture("models/qwen3-mqa-tiny"), 2); }
TEST(TensorParallelCuda, Qwen2BiasTwoGpus) { CompareSplit(Fixture("models/qwen2-tiny"), 2); }
TEST(TensorParallelCuda, StaticFp8TwoGpus) { CompareSplit(Fixture("models/llama-ct-fp8"), 2); }
// Mixture of experts: every rank keeps all experts and a block of each one's intermediate size.
TEST(TensorParallelCuda, Qwen3MoeFourGpus) { CompareSplit(Fixture("models/qwen3-moe-tiny"), 4); }
TEST(TensorParallelCuda, Qwen2MoeSharedExpertTwoGpus) { CompareSplit(Fixture("models/qwen2-moe-tiny"), 2); }
TEST(TensorParallelCuda, Qwen3MoeStaticFp8TwoGpus) { CompareSplit(Fixture("models/qwen3-moe-tiny-fp8"), 2); }

// NCCL loaded and running on this machine's one GPU: a group of one rank, whose all-reduce
// leaves x as it is and whose all-gather copies its columns (needs libnccl.so.2 on the loader
// path or VTLLM_NCCL_LIBRARY).
TEST(TensorParallelCuda, NcclGroupOfOneRunsItsCollectives) {
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  const std::vector<int> devices = {0};
  auto group = vt::MakeNcclGroup(devices);
  ASSERT_EQ(group.size(), 1u);
  vt::Communicator& c = *group[0];
  EXPECT_STREQ(c.kind(), "nccl");
  const vt::Queue q = vt::Queue::Cuda(0);
  std::vector<float> host(6 * 5);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.25f * static_cast<float>(i) - 3.0f;
  const vt::Tensor x = vt::Tensor::FromHost(host.data(), {6, 5}, vt::DType::kF32).To(vt::Device::Cuda(0));
  const vt::Tensor gathered = vt::Tensor::Empty({6, 5}, vt::DType::kF32, vt::Device::Cuda(0));
  c.AllReduceSum(q, x);
  c.AllGatherColumns(q, x, gathered);
  q.Synchronize();
  const vt::Tensor back = x.To(vt::Device::Cpu()), back_g = gathered.To(vt::Device::Cpu());
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_EQ(back.data_as<float>()[i], host[i]) << i;
    EXPECT_EQ(back_g.data_as<float>()[i], host[i]) << i;
  }
  EXPECT_EQ(c.num_collectives(), 2);
}

TEST(TensorParallelCuda, OneRankIsTheUnsplitPath) {
  // --tensor-parallel-size 1 on one GPU: no group, the same logits as the default load.
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  const std::string dir = Fixture("models/llama-tiny");
  auto a = Model::Load(dir, CudaOptions(vt::DType::kBF16, 1));
  auto b = Model::Load(dir, vt::Device::Cuda(0), vt::DType::kBF16);  // no tensor_parallel_size at all
  EXPECT_EQ(a->communicator(), nullptr);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  EXPECT_EQ(testing::PromptLogits(*a, prompt), testing::PromptLogits(*b, prompt));
}

}  // namespace
}  // namespace vtllm::model
