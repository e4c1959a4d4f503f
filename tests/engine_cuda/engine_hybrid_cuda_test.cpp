// The engine serving hybrid Gated DeltaNet models on CUDA with decode steps replayed from
// graphs, in the run of tests/engine/hybrid_serve.h (requests finishing mid-batch, a
// one-token request joining at position 0 inside a decode step, and with a small KV budget
// preemption mid-batch). Per fixture (qwen3-next-tiny, qwen3_5-tiny, qwen3_5-moe-tiny; f32
// activations) and budget:
//  - with graphs the decode steps were replays (graph_stats), --enforce-eager replayed none;
//  - every request's tokens equal, all of them, those of the same engine whose model runs the
//    replays' padded steps eagerly (Model::set_padded_eager_steps: the same computation);
//  - they equal the --enforce-eager engine's up to the reference's first near-tie (the oracle
//    prompts; the eager steps run unpadded GEMM shapes), and for the joining request in full;
//  - every block and state slot is free at the end.
// Without a GPU: SKIPPED.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "engine/hybrid_serve.h"
#include "model/model_oracle.h"
#include "vt/registry.h"

namespace vtllm::engine {
namespace {

using test_util::HybridServeResult;
using test_util::TokenList;

HybridServeResult Serve(const std::string& dir, bool enforce_eager, bool padded_eager, bool small_kv) {
  model::LoadOptions o;
  o.device = vt::Device::Cuda(0);
  o.dtype = vt::DType::kF32;
  o.enforce_eager = enforce_eager;
  o.progress = false;
  return test_util::ServeHybrid(dir, o, padded_eager, small_kv);
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
      const HybridServeResult g = Serve(dir, false, false, small_kv);
      EXPECT_GT(vt::DispatchCount(vt::OpId::kGatedDeltaRule, vt::DeviceType::kCUDA), rule) << what;
      const HybridServeResult p = Serve(dir, false, true, small_kv);
      const HybridServeResult e = Serve(dir, true, false, small_kv);
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
        EXPECT_EQ(TokenList(toks), TokenList(p.tokens.at(id))) << what << " " << id << ": replayed vs padded eager steps";
        const std::vector<int32_t>& want = e.tokens.at(id);
        ASSERT_EQ(toks.size(), want.size()) << what << " " << id;
        size_t n = toks.size();
        if (id != "joins") n = std::min(n, model::testing::StepsBeforeNearTie(cases[std::stoul(id.substr(1))].margins));
        size_t agree = 0;
        while (agree < toks.size() && toks[agree] == want[agree]) ++agree;
        EXPECT_GE(agree, n) << what << " " << id << ": graphs " << TokenList(toks) << " vs --enforce-eager "
                            << TokenList(want) << " (checked up to token " << n << ")";
      }
    }
  }
}

}  // namespace
}  // namespace vtllm::engine
