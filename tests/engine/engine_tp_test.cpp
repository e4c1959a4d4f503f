// The engine over a model split for tensor parallelism (2 ranks, threads of this process on
// CPU): the scheduler, KV-cache manager and sampler run once, on rank 0's model, and every
// step runs on both ranks. Greedy tokens of a mixed batch (prefill chunks and decodes
// together, shared prefixes) equal the unsplit engine's, for dense and mixture-of-experts
// models.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "model/model_oracle.h"

namespace vtllm::engine {
namespace {

using test_util::Greedy;
using test_util::Id;

const std::string kDir = std::string(VTLLM_FIXTURES_DIR) + "/oracles/qwen3-tiny/bf16";

EngineConfig Config(int tp, vt::DType dtype, const std::string& dir = kDir) {
  EngineConfig c;
  c.model_dir = dir;
  c.max_model_len = 256;
  c.max_num_batched_tokens = 48;  // small: long prompts are prefilled in chunks beside decodes
  c.max_num_seqs = 8;
  c.kv_cache_memory_bytes = 1 << 20;
  c.use_generation_config = false;
  c.load = model::testing::CpuOptions(dtype);
  c.load.cpu_threads = 1;
  c.load.tensor_parallel_size = tp;
  return c;
}

std::map<std::string, std::vector<int32_t>> RunRequests(Engine& e) {
  const size_t vocab = std::min<size_t>(500, static_cast<size_t>(e.model().vocab_size()));
  for (size_t i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt;
    // Requests 0-2 share a 20-token prefix (prefix caching); lengths 3 to 70.
    const size_t len = 3 + i * 13;
    for (size_t t = 0; t < len; ++t)
      prompt.push_back(static_cast<int32_t>(i < 3 && t < 20 ? t * 7 % vocab : (t * 31 + i * 5) % vocab));
    e.AddRequest(Greedy(Id(i), prompt, 10));
  }
  std::map<std::string, std::vector<int32_t>> out;
  for (int step = 0; e.HasUnfinished() && step < 1000; ++step)
    for (const RequestOutput& o : e.Step()) {
      EXPECT_FALSE(o.error.has_value()) << *o.error;
      for (const CompletionDelta& d : o.completions)
        out[o.request_id].insert(out[o.request_id].end(), d.token_ids.begin(), d.token_ids.end());
    }
  return out;
}

// The split engine gives the unsplit one's greedy tokens for RunRequests' six requests, and
// its steps ran split: the ranks met in collectives (2 per layer and 2 per step).
void ExpectSplitGivesWholesTokens(Engine& whole, Engine& split) {
  const auto want = RunRequests(whole);
  const auto got = RunRequests(split);
  ASSERT_EQ(want.size(), 6u);
  for (const auto& [id, tokens] : want) {
    EXPECT_EQ(tokens.size(), 10u) << id;
    EXPECT_EQ(got.at(id), tokens) << id;
  }
  const model::Model& m = split.model();
  EXPECT_GE(m.communicator()->num_collectives(), 10 * (2 * m.config().num_hidden_layers + 2));
  EXPECT_EQ(m.rank(1).communicator()->num_collectives(), m.communicator()->num_collectives());
}

TEST(EngineTensorParallel, TwoRanksGiveTheUnsplitEnginesGreedyTokens) {
  Engine whole(Config(1, vt::DType::kF32));
  Engine split(Config(2, vt::DType::kF32));
  ASSERT_EQ(split.model().tensor_parallel_size(), 2);
  ExpectSplitGivesWholesTokens(whole, split);
  EXPECT_EQ(whole.model().communicator(), nullptr);
}

TEST(EngineTensorParallel, MixtureOfExpertsModelsGiveTheUnsplitEnginesGreedyTokens) {
  // Each rank keeps every expert and a block of each one's intermediate size (and of the
  // shared expert's); the block's output is all-reduced like a dense MLP's. Prefill chunks of
  // the 48-token budget run beside decodes.
  for (const char* fixture : {"qwen2-moe-tiny", "qwen3-moe-tiny-fp8"}) {
    SCOPED_TRACE(fixture);
    const std::string dir = std::string(VTLLM_FIXTURES_DIR) + "/models/" + fixture;
    Engine whole(Config(1, vt::DType::kF32, dir));
    Engine split(Config(2, vt::DType::kF32, dir));
    ASSERT_GT(split.model().config().num_experts, 0);
    ExpectSplitGivesWholesTokens(whole, split);
  }
}

}  // namespace
}  // namespace vtllm::engine
