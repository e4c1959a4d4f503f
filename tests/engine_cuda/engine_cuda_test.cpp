// The engine on CUDA: the same requests, batched with chunked prefill and preemption, give on
// the GPU the greedy tokens the CPU engine gives (f32 activations, up to the first near-tie of
// the HF reference), and the sampler's kernels ran on the GPU; decode steps ran as CUDA graph
// replays (counted), and give the tokens of the eager engine, also when requests finish at
// different steps so that the batch shrinks through the buckets; async scheduling gives the
// tokens of the engine that waits for each step. Without a GPU: SKIPPED.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "model/model_oracle.h"
#include "vt/cuda/kernels.h"  // KvCacheFp8Launches
#include "vt/registry.h"

namespace vtllm::engine {
namespace {

using test_util::Id;

using test_util::kTiny;

struct RunOptions {
  bool enforce_eager = false;
  std::vector<int> max_tokens;  // per request (default 24 each)
  model::Model::GraphStats* stats = nullptr;
  std::string kv_cache_dtype = "auto";
  std::optional<bool> async_scheduling;  // nullopt: the engine's default (on with CUDA)
  EngineMetrics* metrics = nullptr;
};

std::map<std::string, std::vector<int32_t>> RunGreedy(vt::Device device, const std::string& dir, int64_t budget,
                                                      int64_t kv_blocks, const RunOptions& ro = {}) {
  model::LoadOptions o;
  o.device = device;
  o.enforce_eager = ro.enforce_eager;
  o.kv_cache_dtype = ro.kv_cache_dtype;
  o.dtype = vt::DType::kF32;
  o.cpu_threads = 2;
  o.progress = false;
  std::shared_ptr<model::Model> m = model::Model::Load(dir, o);
  EngineConfig c;
  c.model_dir = dir;
  c.load = o;
  c.max_model_len = 96;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = budget;
  c.kv_cache_memory_bytes = kv_blocks * m->KvCacheBytesPerBlock(16);
  c.use_generation_config = false;
  c.async_scheduling = ro.async_scheduling;
  Engine e(c, m, std::nullopt);
  const auto cases = model::testing::ReadOracle(kTiny);
  for (size_t i = 0; i < cases.size(); ++i) {
    EngineRequest r;
    r.request_id = Id(i);
    r.prompt_token_ids = cases[i].prompt;
    r.params.temperature = 0;
    r.params.max_tokens = i < ro.max_tokens.size() ? ro.max_tokens[i] : 24;
    r.params.ignore_eos = true;
    e.AddRequest(r);
  }
  std::map<std::string, std::vector<int32_t>> out;
  while (e.HasUnfinished())
    for (const RequestOutput& ro : e.Step())
      for (const CompletionDelta& d : ro.completions)
        out[ro.request_id].insert(out[ro.request_id].end(), d.token_ids.begin(), d.token_ids.end());
  EXPECT_EQ(e.num_free_blocks(), e.num_total_blocks());
  if (kv_blocks <= 6) {
    EXPECT_GT(e.metrics().num_preemptions, 0u);
  }
  if (ro.stats) *ro.stats = m->graph_stats();
  if (ro.metrics) *ro.metrics = e.metrics();
  return out;
}

TEST(EngineCuda, GreedyTokensMatchTheCpuEngineAndTransformers) {
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  const auto cases = model::testing::ReadOracle(kTiny);
  for (const char* sub : {"/bf16", "/fp8_modelopt"}) {
    const int64_t before = vt::DispatchCount(vt::OpId::kSampleTokens, vt::DeviceType::kCUDA);
    const auto gpu = RunGreedy(vt::Device::Cuda(0), kTiny + sub, 16, 6);
    EXPECT_GT(vt::DispatchCount(vt::OpId::kSampleTokens, vt::DeviceType::kCUDA), before) << "CUDA sampler never ran";
    const auto cpu = RunGreedy(vt::Device::Cpu(), kTiny + sub, 16, 6);
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::string id = Id(i);
      const size_t n = model::testing::StepsBeforeNearTie(cases[i].margins);
      ASSERT_EQ(gpu.at(id).size(), 24u);
      for (size_t t = 0; t < n; ++t) {
        EXPECT_EQ(gpu.at(id)[t], cpu.at(id)[t]) << sub << " " << id << " step " << t;
        if (std::string(sub) == "/bf16") {
          EXPECT_EQ(gpu.at(id)[t], cases[i].greedy[t]) << id << " step " << t;
        }
      }
    }
  }
}

TEST(EngineCuda, GraphReplaysGiveTheEagerEnginesTokens) {
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  const auto cases = model::testing::ReadOracle(kTiny);
  for (const char* sub : {"/bf16", "/fp8_modelopt"}) {
    // Requests of different lengths: the decode batch shrinks 4 -> 3 -> 2 -> 1 (buckets 4, 4,
    // 2, 1); with 6 KV blocks some are preempted and come back.
    for (const int64_t kv_blocks : {int64_t{64}, int64_t{6}}) {
      RunOptions graphs, eager;
      graphs.max_tokens = eager.max_tokens = {24, 9, 17, 4};
      model::Model::GraphStats gs, es;
      graphs.stats = &gs;
      eager.stats = &es;
      eager.enforce_eager = true;
      const auto g = RunGreedy(vt::Device::Cuda(0), kTiny + sub, 16, kv_blocks, graphs);
      const auto e = RunGreedy(vt::Device::Cuda(0), kTiny + sub, 16, kv_blocks, eager);
      std::printf("[%s, %lld blocks] graphs: %lld recorded, %lld replays, %lld eager steps\n", sub,
                  static_cast<long long>(kv_blocks), static_cast<long long>(gs.captures),
                  static_cast<long long>(gs.replays), static_cast<long long>(gs.eager));
      EXPECT_GT(gs.replays, 0) << sub << ": no decode step replayed a graph";
      EXPECT_GE(gs.captures, 2) << sub << ": the shrinking batch should need more than one bucket";
      EXPECT_EQ(es.replays, 0) << sub << ": --enforce-eager replayed a graph";
      for (size_t i = 0; i < cases.size(); ++i) {
        const std::string id = Id(i);
        ASSERT_EQ(g.at(id).size(), e.at(id).size()) << sub << " " << id;
        const size_t n = std::min(g.at(id).size(), model::testing::StepsBeforeNearTie(cases[i].margins));
        for (size_t t = 0; t < n; ++t) EXPECT_EQ(g.at(id)[t], e.at(id)[t]) << sub << " " << id << " step " << t;
      }
    }
  }
}

// Async scheduling (on by default with CUDA): steps launched before the step before was
// collected, their decode tokens read from its draw on the device, give the tokens of the
// engine that waits for each step (up to the first near-tie: with 6 blocks the two may
// preempt at different steps, so the batches differ).
TEST(EngineCuda, AsyncSchedulingGivesTheTokensOfWaitingForEachStep) {
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  const auto cases = model::testing::ReadOracle(kTiny);
  for (const char* sub : {"/bf16", "/fp8_modelopt"}) {
    for (const int64_t kv_blocks : {int64_t{64}, int64_t{6}}) {
      RunOptions async, sync;
      async.max_tokens = sync.max_tokens = {24, 9, 17, 4};
      sync.async_scheduling = false;
      EngineMetrics am, sm;
      model::Model::GraphStats gs;
      async.metrics = &am;
      async.stats = &gs;
      sync.metrics = &sm;
      const auto a = RunGreedy(vt::Device::Cuda(0), kTiny + sub, 16, kv_blocks, async);
      const auto w = RunGreedy(vt::Device::Cuda(0), kTiny + sub, 16, kv_blocks, sync);
      std::printf("[%s, %lld blocks] async: %llu of %llu steps launched ahead, %lld graph replays\n", sub,
                  static_cast<long long>(kv_blocks), static_cast<unsigned long long>(am.steps_launched_ahead),
                  static_cast<unsigned long long>(am.steps), static_cast<long long>(gs.replays));
      EXPECT_GT(am.steps_launched_ahead, am.steps / 2) << sub;
      EXPECT_EQ(sm.steps_launched_ahead, 0u) << sub;
      EXPECT_GT(gs.replays, 0) << sub;
      for (size_t i = 0; i < cases.size(); ++i) {
        const std::string id = Id(i);
        ASSERT_EQ(a.at(id).size(), w.at(id).size()) << sub << " " << id;
        const size_t n = kv_blocks > 6 ? a.at(id).size()
                                       : std::min(a.at(id).size(), model::testing::StepsBeforeNearTie(cases[i].margins));
        for (size_t t = 0; t < n; ++t) EXPECT_EQ(a.at(id)[t], w.at(id)[t]) << sub << " " << id << " step " << t;
      }
    }
  }
}

TEST(EngineCuda, Fp8KvCacheGraphReplaysAndPreemptionGiveTheEagerTokens) {
  // --kv-cache-dtype fp8: decode steps replayed from graphs (the scales are captured by value)
  // and preemption by recompute give the eager engine's tokens; the F8E4M3 kernels ran.
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  for (const int64_t kv_blocks : {int64_t{64}, int64_t{6}}) {
    RunOptions graphs, eager;
    graphs.kv_cache_dtype = eager.kv_cache_dtype = "fp8";
    graphs.max_tokens = eager.max_tokens = {24, 9, 17, 4};
    model::Model::GraphStats gs, es;
    graphs.stats = &gs;
    eager.stats = &es;
    eager.enforce_eager = true;
    const int64_t before = vt::cuda::KvCacheFp8Launches().attention;
    const auto g = RunGreedy(vt::Device::Cuda(0), kTiny + "/bf16", 16, kv_blocks, graphs);
    EXPECT_GT(vt::cuda::KvCacheFp8Launches().attention, before) << "the F8E4M3 attention kernel never ran";
    const auto e = RunGreedy(vt::Device::Cuda(0), kTiny + "/bf16", 16, kv_blocks, eager);
    EXPECT_GT(gs.replays, 0);
    EXPECT_EQ(es.replays, 0);
    for (const auto& [id, toks] : e) EXPECT_EQ(g.at(id), toks) << id << " with " << kv_blocks << " blocks";
  }
}

}  // namespace
}  // namespace vtllm::engine
