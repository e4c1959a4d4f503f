// The engine serving a Qwen3-MoE model (make_random_checkpoint's qwen3-moe-tiny: layer 0 dense,
// layers 1-3 with 8 experts of which 2 per token), BF16 and FP8 experts, f32 activations:
// several requests batched (whole prefills, then 16-token chunks mixed with decodes) give
// each request the greedy tokens it gets alone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "model/model_oracle.h"

#ifndef VTLLM_TOOL_RUNNER
#define VTLLM_TOOL_RUNNER ""  // a cross build's emulator, e.g. "qemu-aarch64 -L /usr/aarch64-linux-gnu "
#endif

namespace vtllm::engine {
namespace {

using test_util::Greedy;
using test_util::Id;

// A fresh checkpoint directory, removed at the end of the test.
struct MoeCheckpoint {
  explicit MoeCheckpoint(const std::string& format) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "vtllm_moe_XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir = tmpl;
    const std::string tool = std::string(VTLLM_BINARY_DIR) + "/tools/make_random_checkpoint";
    const std::string cmd =
        tool + " --out " + dir + " --preset qwen3-moe-tiny --seed 9 --threads 2 --format " + format + " 2>/dev/null";
    EXPECT_EQ(std::system((VTLLM_TOOL_RUNNER + cmd).c_str()), 0) << cmd;
  }
  ~MoeCheckpoint() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string dir;
};

EngineConfig Config(const std::string& dir, int64_t budget) {
  EngineConfig c;
  c.model_dir = dir;
  c.max_model_len = 128;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = 8;
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

void CheckBatchedEqualsAlone(const std::string& format) {
  MoeCheckpoint ckpt(format);
  std::shared_ptr<model::Model> m = model::Model::Load(ckpt.dir, model::testing::CpuOptions(vt::DType::kF32));
  std::mt19937 rng(4);
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {1, 5, 19, 33, 8}) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(rng() % 256));
    prompts.push_back(p);
  }
  std::map<std::string, std::vector<int32_t>> alone;
  for (size_t c = 0; c < prompts.size(); ++c) {
    Engine e(Config(ckpt.dir, 0), m, std::nullopt);
    e.AddRequest(Greedy(Id(c), prompts[c], 16));
    alone[Id(c)] = RunAll(e)[Id(c)];
    ASSERT_EQ(alone[Id(c)].size(), 16u);
  }
  for (const int64_t budget : {int64_t{0}, int64_t{16}}) {
    Engine e(Config(ckpt.dir, budget), m, std::nullopt);
    for (size_t c = 0; c < prompts.size(); ++c) e.AddRequest(Greedy(Id(c), prompts[c], 16));
    auto res = RunAll(e);
    for (size_t c = 0; c < prompts.size(); ++c)
      EXPECT_EQ(res[Id(c)], alone[Id(c)]) << format << " " << Id(c) << " budget " << budget;
    EXPECT_EQ(e.num_free_blocks(), e.num_total_blocks());
  }
}

TEST(EngineMoe, Bf16ExpertsBatchedGreedyMatchesEachAlone) { CheckBatchedEqualsAlone("bf16"); }
TEST(EngineMoe, Fp8ExpertsBatchedGreedyMatchesEachAlone) { CheckBatchedEqualsAlone("fp8-modelopt"); }

}  // namespace
}  // namespace vtllm::engine
