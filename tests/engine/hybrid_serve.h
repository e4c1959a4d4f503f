// One engine run over a hybrid fixture, shared by the CPU and CUDA engine tests
// (engine_hybrid_test.cpp, engine_cuda/engine_hybrid_cuda_test.cpp): the fixture's five
// oracle prompts, and a one-token request that joins after three steps (its first token runs
// at position 0 inside a decode step, in a slot the model zeroes first). With 64 KV blocks
// the prompts ask for 24, 9, 17, 4 and 13 tokens (requests finish mid-batch, so a decode
// batch shrinks through the graph buckets and has padding rows). `small_kv`: the budget holds
// the 8 state slots and 9 blocks of 16 tokens (the longest request alone needs 8) and each
// prompt asks for 24 tokens, so requests are preempted mid-batch and recomputed (the caller
// checks the count). Checks that every block and slot is free at the end.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "model/model_oracle.h"

namespace vtllm::engine::test_util {

struct HybridServeResult {
  std::map<std::string, std::vector<int32_t>> tokens;  // by request id: "r0".."r4", "joins"
  model::Model::GraphStats stats;
  uint64_t preemptions = 0;
};

inline HybridServeResult ServeHybrid(const std::string& dir, const model::LoadOptions& o, bool padded_eager_steps,
                                     bool small_kv) {
  std::shared_ptr<model::Model> m = model::Model::Load(dir, o);
  m->set_padded_eager_steps(padded_eager_steps);
  EngineConfig c;
  c.model_dir = dir;
  c.load = o;
  c.max_model_len = 128;
  c.max_num_seqs = 8;
  c.use_generation_config = false;
  c.kv_cache_memory_bytes = 8 * m->StateBytesPerSlot() + (small_kv ? 9 : 64) * m->KvCacheBytesPerBlock(16);
  Engine e(c, m, std::nullopt);
  const auto cases = model::testing::ReadOracle(dir);
  EXPECT_GE(cases.size(), 5u) << dir;
  const int64_t max_tokens[] = {24, 9, 17, 4, 13};
  for (size_t i = 0; i < cases.size() && i < 5; ++i)
    e.AddRequest(Greedy(Id(i), cases[i].prompt, small_kv ? 24 : max_tokens[i]));
  HybridServeResult r;
  for (int step = 0; e.HasUnfinished() && step < 10000; ++step) {
    if (step == 3 && !cases.empty()) e.AddRequest(Greedy("joins", {cases[0].prompt[0]}, 10));
    for (const RequestOutput& out : e.Step())
      for (const CompletionDelta& d : out.completions)
        r.tokens[out.request_id].insert(r.tokens[out.request_id].end(), d.token_ids.begin(), d.token_ids.end());
  }
  EXPECT_FALSE(e.HasUnfinished());
  EXPECT_EQ(e.num_free_blocks(), e.num_total_blocks());
  EXPECT_EQ(e.num_free_state_slots(), e.num_state_slots());
  r.stats = m->graph_stats();
  r.preemptions = e.metrics().num_preemptions;
  return r;
}

// Token ids as "1,2,3" (appended, not operator+: GCC 12 warns falsely on it at -O3).
inline std::string TokenList(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t t : v) {
    if (!s.empty()) s.push_back(',');
    s.append(std::to_string(t));
  }
  return s;
}

}  // namespace vtllm::engine::test_util
