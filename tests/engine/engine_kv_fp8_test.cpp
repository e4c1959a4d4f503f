// The engine with --kv-cache-dtype fp8 (tests/fixtures/oracles/qwen3-tiny, F32 activations
// and an F8E4M3 cache): the same --kv-cache-memory-bytes holds twice the blocks of the BF16
// cache, and batching, chunked prefill and preemption by recompute give every request the
// tokens it gets alone (the cache bytes of a token depend only on its key and value).
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "model/model_oracle.h"

namespace vtllm::engine {
namespace {

using test_util::Greedy;
using test_util::Id;

const std::string kTiny = std::string(VTLLM_FIXTURES_DIR) + "/oracles/qwen3-tiny/bf16";

std::shared_ptr<model::Model> Load(const std::string& kv, vt::DType act) {
  model::LoadOptions o = model::testing::CpuOptions(act);
  o.kv_cache_dtype = kv;
  return model::Model::Load(kTiny, o);
}

EngineConfig Config(int64_t budget, int64_t kv_bytes, int64_t max_model_len = 256) {
  EngineConfig c;
  c.model_dir = kTiny;
  c.max_model_len = max_model_len;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = 16;
  c.kv_cache_memory_bytes = kv_bytes;
  c.use_generation_config = false;
  c.load.progress = false;
  return c;
}

std::map<std::string, std::vector<int32_t>> RunAll(Engine& e) {
  std::map<std::string, std::vector<int32_t>> out;
  while (e.HasUnfinished())
    for (RequestOutput& o : e.Step())
      for (const CompletionDelta& d : o.completions) {
        auto& t = out[o.request_id];
        t.insert(t.end(), d.token_ids.begin(), d.token_ids.end());
      }
  return out;
}

std::vector<std::vector<int32_t>> Prompts() {
  std::vector<std::vector<int32_t>> p;
  for (int n : {88, 40, 65, 7}) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back((i * 53 + n * 7 + 3) % 500);
    p.push_back(v);
  }
  return p;
}

TEST(EngineKvFp8, TheSameBudgetHoldsTwiceTheBlocks) {
  auto bf16 = Load("auto", vt::DType::kBF16);
  auto fp8 = Load("fp8", vt::DType::kBF16);
  const int64_t per_block = bf16->KvCacheBytesPerBlock(16);
  Engine a(Config(0, 12 * per_block, 128), bf16, std::nullopt);
  Engine b(Config(0, 12 * per_block, 128), fp8, std::nullopt);
  EXPECT_EQ(a.num_total_blocks(), 12);
  EXPECT_EQ(b.num_total_blocks(), 24);
}

TEST(EngineKvFp8, BatchingChunkingAndPreemptionKeepEachRequestsTokens) {
  auto model = Load("fp8", vt::DType::kF32);
  const auto prompts = Prompts();
  std::map<std::string, std::vector<int32_t>> alone;
  for (size_t c = 0; c < prompts.size(); ++c) {
    Engine e(Config(0, 0), model, std::nullopt);
    e.AddRequest(Greedy(Id("r", c), prompts[c], 24));
    alone.merge(RunAll(e));
  }
  // All at once, 32-token step budget (chunked prefill), room for 7 blocks of 16 tokens: the
  // 88-token prompt with its 24 new tokens takes 7, so the others are preempted and recomputed.
  const int64_t per_block = model->KvCacheBytesPerBlock(16);
  Engine e(Config(32, 7 * per_block, 112), model, std::nullopt);
  EXPECT_EQ(e.num_total_blocks(), 7);
  for (size_t c = 0; c < prompts.size(); ++c) e.AddRequest(Greedy(Id("r", c), prompts[c], 24));
  auto together = RunAll(e);
  EXPECT_GT(e.metrics().num_preemptions, 0u);
  for (const auto& [id, toks] : alone) {
    EXPECT_EQ(toks.size(), 24u) << id;
    EXPECT_EQ(together[id], toks) << id;
  }
  EXPECT_EQ(e.num_free_blocks(), e.num_total_blocks());
}

}  // namespace
}  // namespace vtllm::engine
