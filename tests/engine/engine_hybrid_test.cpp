// The engine serving hybrid Gated DeltaNet models (tests/fixtures/models/qwen3-next-tiny and
// qwen3_5-moe-tiny, f32 activations): each running request holds a recurrent-state slot beside its KV blocks.
// Batched requests, chunked prefills mixed with decodes, and preempted requests (their state
// freed and recomputed) give each request the greedy tokens it gets alone, which are HF's up
// to the first near-tie; every slot and block is free at the end; prefix caching is off.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/hybrid_serve.h"
#include "model/model_oracle.h"
#include "vt/error.h"

namespace vtllm::engine {
namespace {

using test_util::Greedy;
using test_util::Id;

const std::string kNext = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen3-next-tiny";
const std::string kQwen35Moe = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen3_5-moe-tiny";

std::shared_ptr<model::Model> LoadOnce(const std::string& dir) {
  static std::map<std::string, std::shared_ptr<model::Model>> models;
  auto& m = models[dir];
  if (!m) m = model::Model::Load(dir, model::testing::CpuOptions(vt::DType::kF32));
  return m;
}

std::shared_ptr<model::Model> NextModel() { return LoadOnce(kNext); }

EngineConfig Config(int64_t budget = 0, int64_t kv_bytes = 0, int64_t max_model_len = 256,
                    const std::string& dir = kNext) {
  EngineConfig c;
  c.model_dir = dir;
  c.max_model_len = max_model_len;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = 8;
  c.kv_cache_memory_bytes = kv_bytes;
  c.use_generation_config = false;
  c.load.progress = false;
  return c;
}

std::map<std::string, std::vector<int32_t>> RunAll(Engine& e) {
  std::map<std::string, std::vector<int32_t>> tokens;
  for (int step = 0; e.HasUnfinished() && step < 10000; ++step)
    for (RequestOutput& o : e.Step())
      for (const CompletionDelta& d : o.completions)
        tokens[o.request_id].insert(tokens[o.request_id].end(), d.token_ids.begin(), d.token_ids.end());
  EXPECT_FALSE(e.HasUnfinished());
  return tokens;
}

void ExpectAllFree(const Engine& e) {
  EXPECT_EQ(e.num_free_blocks(), e.num_total_blocks());
  EXPECT_EQ(e.num_free_state_slots(), e.num_state_slots());
}

void CheckGreedyAndBatching(const std::string& dir) {
  const auto cases = model::testing::ReadOracle(dir);
  std::map<std::string, std::vector<int32_t>> alone;
  for (size_t c = 0; c < cases.size(); ++c) {
    Engine e(Config(0, 0, 256, dir), LoadOnce(dir), std::nullopt);
    EXPECT_EQ(e.num_state_slots(), 8);
    EXPECT_FALSE(e.config().enable_prefix_caching);  // refused for a hybrid model
    e.AddRequest(Greedy(Id(c), cases[c].prompt, 20));
    alone[Id(c)] = RunAll(e)[Id(c)];
    ExpectAllFree(e);
    const size_t n = model::testing::StepsBeforeNearTie(cases[c].margins);
    ASSERT_EQ(alone[Id(c)].size(), 20u);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(alone[Id(c)][i], cases[c].greedy[i]) << "case " << c << " step " << i;
  }
  // Whole prefills together, then 16-token chunks mixed with decodes.
  for (const int64_t budget : {int64_t{0}, int64_t{16}}) {
    Engine e(Config(budget, 0, 256, dir), LoadOnce(dir), std::nullopt);
    for (size_t c = 0; c < cases.size(); ++c) e.AddRequest(Greedy(Id(c), cases[c].prompt, 20));
    auto res = RunAll(e);
    for (size_t c = 0; c < cases.size(); ++c) EXPECT_EQ(res[Id(c)], alone[Id(c)]) << Id(c) << " budget " << budget;
    ExpectAllFree(e);
  }
}

void CheckPreemption(const std::string& dir) {
  const auto cases = model::testing::ReadOracle(dir);
  std::map<std::string, std::vector<int32_t>> want;
  {
    Engine e(Config(0, 0, 256, dir), LoadOnce(dir), std::nullopt);
    for (size_t c = 0; c < cases.size(); ++c) e.AddRequest(Greedy(Id(c), cases[c].prompt, 24));
    want = RunAll(e);
  }
  // The budget holds the 8 state slots and 9 blocks of 16 tokens: the longest request
  // (97 + 24 tokens) alone needs 8, so the five cannot all run together.
  const int64_t per_block = LoadOnce(dir)->KvCacheBytesPerBlock(16);
  const int64_t state = 8 * LoadOnce(dir)->StateBytesPerSlot();
  Engine e(Config(0, state + 9 * per_block, 128, dir), LoadOnce(dir), std::nullopt);
  EXPECT_EQ(e.num_total_blocks(), 9);
  for (size_t c = 0; c < cases.size(); ++c) e.AddRequest(Greedy(Id(c), cases[c].prompt, 24));
  auto res = RunAll(e);
  EXPECT_GT(e.metrics().num_preemptions, 0u);
  for (auto& [id, toks] : want) EXPECT_EQ(res[id], toks) << id;
  ExpectAllFree(e);
}

TEST(EngineHybrid, GreedyAloneMatchesHfAndBatchesMatchAlone) { CheckGreedyAndBatching(kNext); }
TEST(EngineHybrid, PreemptedRequestsResumeWithTheSameTokens) { CheckPreemption(kNext); }
// Qwen3.5-MoE: every layer's MLP a sparse MoE with a gated shared expert, experts fused.
TEST(EngineHybrid, Qwen3_5MoeGreedyAloneMatchesHfAndBatchesMatchAlone) { CheckGreedyAndBatching(kQwen35Moe); }
TEST(EngineHybrid, Qwen3_5MoePreemptedRequestsResumeWithTheSameTokens) { CheckPreemption(kQwen35Moe); }

// Decode steps padded to their CUDA graph bucket (Model::set_padded_eager_steps: padding rows
// with state slot -1), run eagerly on the CPU, give every request the tokens of the unpadded
// engine, with requests finishing and preempted mid-batch and one joining at position 0
// (tests/engine/hybrid_serve.h).
TEST(EngineHybrid, PaddedDecodeStepsGiveTheUnpaddedTokens) {
  for (const std::string& dir : {kNext, kQwen35Moe}) {
    for (const bool small_kv : {false, true}) {
      const auto o = model::testing::CpuOptions(vt::DType::kF32);
      const test_util::HybridServeResult padded = test_util::ServeHybrid(dir, o, true, small_kv);
      const test_util::HybridServeResult plain = test_util::ServeHybrid(dir, o, false, small_kv);
      EXPECT_GT(padded.stats.padded_eager, 0) << dir;
      EXPECT_EQ(plain.stats.padded_eager, 0) << dir;
      if (small_kv) {
        EXPECT_GT(padded.preemptions, 0u) << dir;
      }
      ASSERT_EQ(padded.tokens.size(), 6u) << dir;
      for (const auto& [id, toks] : plain.tokens)
        EXPECT_EQ(test_util::TokenList(padded.tokens.at(id)), test_util::TokenList(toks))
            << dir << " " << id << (small_kv ? " with 9 KV blocks" : "");
    }
  }
}

TEST(EngineHybrid, AbortedRequestsGiveTheirSlotsBack) {
  const auto cases = model::testing::ReadOracle(kNext);
  Engine e(Config(), NextModel(), std::nullopt);
  for (size_t c = 0; c < cases.size(); ++c) e.AddRequest(Greedy(Id(c), cases[c].prompt, 50));
  e.Step();
  EXPECT_LT(e.num_free_state_slots(), e.num_state_slots());
  for (size_t c = 0; c < cases.size(); ++c) e.Abort(Id(c));
  for (int i = 0; i < 4 && e.HasUnfinished(); ++i) e.Step();
  ExpectAllFree(e);
}

TEST(EngineHybrid, TheStateBudgetIsChecked) {
  // Less than the state of max_num_seqs sequences: an error naming the flags.
  const int64_t state = 8 * NextModel()->StateBytesPerSlot();
  try {
    Engine e(Config(0, state / 2), NextModel(), std::nullopt);
    ADD_FAILURE() << "an engine without room for its recurrent state";
  } catch (const vt::Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("--max-num-seqs"), std::string::npos) << m;
    EXPECT_NE(m.find("--kv-cache-memory-bytes"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace vtllm::engine
