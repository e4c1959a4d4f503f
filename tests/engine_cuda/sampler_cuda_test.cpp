// engine::Sampler on CUDA against the same Sampler on the CPU: the same tokens, ranks and
// top ids, logprobs within 1e-5, with every processing step in use; DispatchCount proves
// the CUDA kernels ran. Without a GPU the test reports SKIPPED.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/sampler.h"
#include "vt/ops/sampling.h"
#include "vt/sampling_test_ref.h"
#include "vt_cuda/cuda_test_util.h"

namespace vtllm::engine {
namespace {

TEST(SamplerCuda, SameTokensAndLogprobsAsCpu) {
  VT_REQUIRE_CUDA();
  const int64_t V = 151936, R = 12;
  vt::Queue cpu_q = vt::Queue::Cpu(2), gpu_q = vt::Queue::Cuda(0);
  Sampler cpu(cpu_q, V, R), gpu(gpu_q, V, R);
  const std::vector<int32_t> prompt = {1, 2, 3, 500, 500, 151935}, output = {7, 7, 8, 1, 90000};
  const std::vector<int32_t> allowed = {3, 9, 27, 81, 243, 729}, banned = {0, 1, 2, 3, 4};
  const std::vector<std::pair<int32_t, float>> bias = {{7, 3.0f}, {11, -5.0f}, {151000, 8.0f}};
  for (uint64_t step = 0; step < 4; ++step) {
    std::vector<float> flat;
    std::vector<SamplingRow> rows(R);
    for (int64_t r = 0; r < R; ++r) {
      const auto x = sampling_ref::RandomLogits(V, static_cast<uint32_t>(step * 100 + r), 3.0f, r % 3 == 0);
      flat.insert(flat.end(), x.begin(), x.end());
      SamplingRow& s = rows[r];
      s.seed = 10 + r, s.draw_index = step;
      s.temperature = r == 0 ? 0.0f : 0.4f + 0.15f * static_cast<float>(r);
      s.top_k = r % 4 == 1 ? 50 : 0;
      s.top_p = r % 3 == 2 ? 0.85f : 1.0f;
      s.min_p = r == 5 ? 0.05f : 0.0f;
      s.repetition_penalty = r % 2 ? 1.2f : 1.0f;
      s.frequency_penalty = r == 3 ? 0.5f : 0.0f;
      s.presence_penalty = r == 4 ? 0.7f : 0.0f;
      s.num_logprobs = r % 2 ? static_cast<int>(r) : -1;
      s.prompt_tokens = prompt, s.output_tokens = output;
      if (r == 6) s.allowed_token_ids = allowed;
      if (r == 7) s.banned_token_ids = banned;
      if (r == 8 || r == 9) s.logit_bias = bias;
    }
    vt::Tensor lc = vt::Tensor::FromHost(flat.data(), {R, V}, vt::DType::kF32);
    vt::Tensor lg = lc.To(vtt::kCuda);
    const int64_t before = vt::DispatchCount(vt::OpId::kSampleTokens, vt::DeviceType::kCUDA);
    const auto g = gpu.Sample(lg, rows);
    EXPECT_EQ(vt::DispatchCount(vt::OpId::kSampleTokens, vt::DeviceType::kCUDA), before + 1);
    const auto c = cpu.Sample(lc, rows);
    for (int64_t r = 0; r < R; ++r) {
      const std::string where = "step " + std::to_string(step) + " row " + std::to_string(r);
      EXPECT_EQ(g[r].token_id, c[r].token_id) << where;
      ASSERT_EQ(g[r].logprobs.has_value(), c[r].logprobs.has_value()) << where;
      if (!c[r].logprobs) continue;
      EXPECT_EQ(g[r].logprobs->chosen.rank, c[r].logprobs->chosen.rank) << where;
      EXPECT_NEAR(g[r].logprobs->chosen.logprob, c[r].logprobs->chosen.logprob, 1e-5) << where;
      ASSERT_EQ(g[r].logprobs->top.size(), c[r].logprobs->top.size()) << where;
      for (size_t j = 0; j < c[r].logprobs->top.size(); ++j) {
        EXPECT_EQ(g[r].logprobs->top[j].token_id, c[r].logprobs->top[j].token_id) << where;
        EXPECT_NEAR(g[r].logprobs->top[j].logprob, c[r].logprobs->top[j].logprob, 1e-5) << where;
      }
    }
    // The processed logits agree too (the steps before the draw are exact).
    EXPECT_TRUE(vtt::SameBytes(lg, lc)) << "step " << step;
  }
  EXPECT_GT(vt::DispatchCount(vt::OpId::kLogitsMask, vt::DeviceType::kCUDA), 0);
  EXPECT_GT(vt::DispatchCount(vt::OpId::kLogitsAddSparse, vt::DeviceType::kCUDA), 0);
  EXPECT_GT(vt::DispatchCount(vt::OpId::kLogitsPenalties, vt::DeviceType::kCUDA), 0);
  EXPECT_GT(vt::DispatchCount(vt::OpId::kTopKLogprobs, vt::DeviceType::kCUDA), 0);
}

TEST(SamplerCuda, PromptLogprobsMatchCpu) {
  VT_REQUIRE_CUDA();
  const int64_t V = 32000, R = 9;
  vt::Queue cpu_q = vt::Queue::Cpu(2), gpu_q = vt::Queue::Cuda(0);
  Sampler cpu(cpu_q, V, 4), gpu(gpu_q, V, 4);
  std::vector<float> flat;
  std::vector<int32_t> targets;
  for (int64_t r = 0; r < R; ++r) {
    const auto x = sampling_ref::RandomLogits(V, static_cast<uint32_t>(300 + r));
    flat.insert(flat.end(), x.begin(), x.end());
    targets.push_back(static_cast<int32_t>(r * 3001 % V));
  }
  vt::Tensor lc = vt::Tensor::FromHost(flat.data(), {R, V}, vt::DType::kF32);
  const auto g = gpu.Logprobs(lc.To(vtt::kCuda), targets, 5);
  const auto c = cpu.Logprobs(lc, targets, 5);
  for (int64_t r = 0; r < R; ++r) {
    EXPECT_EQ(g[r].chosen.rank, c[r].chosen.rank) << r;
    EXPECT_NEAR(g[r].chosen.logprob, c[r].chosen.logprob, 1e-5) << r;
    for (size_t j = 0; j < 5; ++j) EXPECT_EQ(g[r].top[j].token_id, c[r].top[j].token_id) << r;
  }
}

}  // namespace
}  // namespace vtllm::engine
