// The engine serving hybrid Gated DeltaNet models on CUDA with decode steps replayed from
// graphs: the fixtures' five prompts with different max_tokens (requests finish mid-batch,
// so the batch shrinks through the buckets and padding rows appear), a one-token request
// that joins after three steps (its first token runs at position 0 inside a replayed step,
// in a slot the model zeroes first), and a KV budget small enough that requests are
// preempted mid-batch and recomputed. Per fixture (qwen3-next-tiny, qwen3_5-tiny,
// qwen3_5-moe-tiny; f32 activations):
//  - with graphs the decode steps were replays (graph_stats), --enforce-eager replayed none;
//  - every request's tokens equal, all of them, those of the same engine whose model runs the
//    replays' padded steps eagerly (Model::set_padded_eager_steps: the same computation);
//  - they equal the --enforce-eager engine's up to the reference's first near-tie (the oracle
//    prompts; the eager steps run unpadded GEMM shapes), and for the joining request in full;
//  - every block and state slot is free at the end.
// Without a GPU: SKIPPED.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "model/model_oracle.h"
#include "vt/registry.h"

namespace vtllm::engine {
namespace {

using test_util::Greedy;
using test_util::Id;

enum class Mode { kGraphs, kPaddedEager, kEnforceEager };

struct Result {
  std::map<std::string, std::vector<int32_t>> tokens;
  model::Model::GraphStats stats;
  uint64_t preemptions = 0;
};

Result Serve(const std::string& dir, Mode mode, bool small_kv) {
  model::LoadOptions o;
  o.device = vt::Device::Cuda(0);
  o.dtype = vt::DType::kF32;
  o.enforce_eager = mode == Mode::kEnforceEager;
  o.progress = false;
  std::shared_ptr<model::Model> m = model::Model::Load(dir, o);
  m->set_padded_eager_steps(mode == Mode::kPaddedEager);
  EngineConfig c;
  c.model_dir = dir;
  c.load = o;
  c.max_model_len = 128;
  c.max_num_seqs = 8;
  c.use_generation_config = false;
  // Small: the 8 state slots and 9 blocks of 16 tokens (the longest request alone needs 8).
  if (small_kv) c.kv_cache_memory_bytes = 8 * m->StateBytesPerSlot() + 9 * m->KvCacheBytesPerBlock(16);
  Engine e(c, m, std::nullopt);
  const auto cases = model::testing::ReadOracle(dir);
  const int64_t max_tokens[] = {24, 9, 17, 4, 13};
  for (size_t i = 0; i < cases.size() && i < 5; ++i) e.AddRequest(Greedy(Id(i), cases[i].prompt, max_tokens[i]));
  Result r;
  for (int step = 0; e.HasUnfinished() && step < 10000; ++step) {
    if (step == 3) e.AddRequest(Greedy("joins", {cases[0].prompt[0]}, 10));
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

std::string Tokens(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t t : v) {  // append, not operator+ (GCC 12 warns falsely on it at -O3)
    if (!s.empty()) s.push_back(',');
    s.append(std::to_string(t));
  }
  return s;
}

TEST(EngineCuda, HybridGraphReplaysGiveTheEagerEnginesTokens) {
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  for (const char* name : {"qwen3-next-tiny", "qwen3_5-tiny", "qwen3_5-moe-tiny"}) {
    const std::string dir = std::string(VTLLM_FIXTURES_DIR) + "/models/" + name;
    const auto cases = model::testing::ReadOracle(dir);
    ASSERT_GE(cases.size(), 5u) << dir;
    for (const bool small_kv : {false, true}) {
      const std::string what = std::string(name) + (small_kv ? ", 9 KV blocks" : ", ample KV");
      const int64_t rule = vt::DispatchCount(vt::OpId::kGatedDeltaRule, vt::DeviceType::kCUDA);
      const Result g = Serve(dir, Mode::kGraphs, small_kv);
      EXPECT_GT(vt::DispatchCount(vt::OpId::kGatedDeltaRule, vt::DeviceType::kCUDA), rule) << what;
      const Result p = Serve(dir, Mode::kPaddedEager, small_kv);
      const Result e = Serve(dir, Mode::kEnforceEager, small_kv);
      std::printf("[%s] graphs: %lld recorded, %lld replays, %lld eager steps, %llu preemptions\n", what.c_str(),
                  static_cast<long long>(g.stats.captures), static_cast<long long>(g.stats.replays),
                  static_cast<long long>(g.stats.eager), static_cast<unsigned long long>(g.preemptions));
      EXPECT_GT(g.stats.replays, 0) << what << ": no decode step replayed a graph";
      EXPECT_GE(g.stats.captures, 2) << what << ": the shrinking batch should need more than one bucket";
      EXPECT_EQ(p.stats.replays, 0) << what;
      EXPECT_EQ(p.stats.padded_eager, g.stats.replays) << what << ": the padded run's steps are the replayed ones";
      EXPECT_EQ(e.stats.replays + e.stats.padded_eager, 0) << what << ": --enforce-eager ran a decode step padded";
      if (small_kv) {
        EXPECT_GT(g.preemptions, 0u) << what << ": the small KV budget should preempt";
      }
      ASSERT_EQ(g.tokens.size(), 6u) << what;
      for (const auto& [id, toks] : g.tokens) {
        EXPECT_EQ(Tokens(toks), Tokens(p.tokens.at(id))) << what << " " << id << ": replayed vs padded eager steps";
        const std::vector<int32_t>& want = e.tokens.at(id);
        ASSERT_EQ(toks.size(), want.size()) << what << " " << id;
        size_t n = toks.size();
        if (id != "joins") n = std::min(n, model::testing::StepsBeforeNearTie(cases[std::stoul(id.substr(1))].margins));
        size_t agree = 0;
        while (agree < toks.size() && toks[agree] == want[agree]) ++agree;
        EXPECT_GE(agree, n) << what << " " << id << ": graphs " << Tokens(toks) << " vs --enforce-eager "
                            << Tokens(want) << " (checked up to token " << n << ")";
      }
    }
  }
}

}  // namespace
}  // namespace vtllm::engine
