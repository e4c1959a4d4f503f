// The engine on CUDA: the same requests, batched with chunked prefill and preemption, give on
// the GPU the greedy tokens the CPU engine gives (f32 activations, up to the first near-tie of
// the HF reference), and the sampler's kernels ran on the GPU. Without a GPU: SKIPPED.
#include <gtest/gtest.h>

#include <map>

#include "engine/engine.h"
#include "model/model_oracle.h"
#include "vt/registry.h"

namespace vtllm::engine {
namespace {

// "r" + i, built without operator+ (GCC 12 warns falsely on it at -O3).
std::string Id(size_t i) {
  std::string s("r");
  s.append(std::to_string(i));
  return s;
}

const std::string kTiny = std::string(VTLLM_FIXTURES_DIR) + "/oracles/qwen3-tiny";

std::map<std::string, std::vector<int32_t>> RunGreedy(vt::Device device, const std::string& dir, int64_t budget,
                                                      int64_t kv_blocks) {
  model::LoadOptions o;
  o.device = device;
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
  Engine e(c, m, std::nullopt);
  const auto cases = model::testing::ReadOracle(kTiny);
  for (size_t i = 0; i < cases.size(); ++i) {
    EngineRequest r;
    r.request_id = Id(i);
    r.prompt_token_ids = cases[i].prompt;
    r.params.temperature = 0;
    r.params.max_tokens = 24;
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

}  // namespace
}  // namespace vtllm::engine
