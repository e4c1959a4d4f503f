// Hybrid decode steps padded to their CUDA graph bucket (Model::set_padded_eager_steps), on
// the CPU: the padding rows (token 0, KV slot -1, state slot -1) leave every state slot no
// sequence holds untouched, and the real rows' logits and final states are those of the
// unpadded eager steps up to f32 rounding (the GEMMs then run more rows). The run is the
// scenario of hybrid_decode_steps.h over the three hybrid fixtures, f32 activations; the
// CUDA graph test (tests/model_cuda/hybrid_graph_test.cpp) compares replays with these
// padded steps bit for bit.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "model/hybrid_decode_steps.h"
#include "model/model_oracle.h"

namespace vtllm::model {
namespace {

const std::string kFixtures = std::string(VTLLM_FIXTURES_DIR) + "/models/";

std::vector<std::vector<int32_t>> OraclePrompts(const std::string& dir) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& c : testing::ReadOracle(dir)) out.push_back(c.prompt);
  return out;
}

class HybridPaddedSteps : public ::testing::TestWithParam<const char*> {};

TEST_P(HybridPaddedSteps, PaddingTouchesNoStateAndMatchesTheUnpaddedSteps) {
  const std::string dir = kFixtures + GetParam();
  auto m = Model::Load(dir, testing::CpuOptions(vt::DType::kF32));
  ASSERT_TRUE(m->has_recurrent_state());
  EXPECT_FALSE(m->step_graphs()) << "no graphs on the CPU";
  const auto prompts = OraclePrompts(dir);
  const int64_t V = m->vocab_size();

  const testing::DecodeRun plain = testing::RunHybridDecodeSteps(*m, prompts);
  m->set_padded_eager_steps(true);
  const testing::DecodeRun padded = testing::RunHybridDecodeSteps(*m, prompts);
  m->set_padded_eager_steps(false);

  ASSERT_EQ(padded.num_decode_steps, 9);
  EXPECT_EQ(padded.stats.padded_eager, padded.num_decode_steps) << "decode steps that did not run padded";
  EXPECT_EQ(plain.stats.padded_eager, 0);
  EXPECT_EQ(padded.stats.replays + plain.stats.replays, 0);
  EXPECT_EQ(testing::UnusedSlotsChanged(padded), "");
  EXPECT_EQ(testing::UnusedSlotsChanged(plain), "");
  std::string where;
  const double err = testing::MaxStepLogitDiff(padded, plain, V, &where);
  std::printf("[%s] padded vs unpadded steps: max |logit diff| = %.3g (at %s); bit-identical: %s\n", GetParam(), err,
              where.c_str(), testing::FirstLogitDifference(padded, plain, V).empty() ? "yes" : "no");
  EXPECT_LE(err, 1e-4) << GetParam() << " at " << where;
  // The states of the slots in use: the same f32 rounding bound, read as floats (ssm) or
  // exact (conv states hold copies of the projections' outputs, which the GEMMs round).
  for (size_t t = 0; t < padded.state.size(); ++t) {
    if (padded.state_names[t].find("ssm") == std::string::npos) continue;
    const size_t n = padded.state[t].size() / sizeof(float);
    std::vector<float> a(n), b(n);
    std::memcpy(a.data(), padded.state[t].data(), padded.state[t].size());
    std::memcpy(b.data(), plain.state[t].data(), plain.state[t].size());
    double worst = 0;
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    EXPECT_LE(worst, 1e-4) << GetParam() << " " << padded.state_names[t];
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridPaddedSteps,
                         ::testing::Values("qwen3-next-tiny", "qwen3_5-tiny", "qwen3_5-moe-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace vtllm::model
