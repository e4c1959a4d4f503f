// Tensor parallelism of a sparse MoE block (vLLM's FusedMoE without expert parallelism): each
// rank keeps every expert but a block of each one's intermediate size, and the shared
// expert's; the ranks' outputs summed (the all-reduce the decoder runs after the block) equal
// the unsplit block's. Here the block alone, each rank's shard loaded beside the whole one,
// with F32 activations: only the order of each expert's down-projection sum differs, so the
// sum equals the whole block's to a few f32 roundings. The whole models' TP runs are in
// tensor_parallel_test.cpp; the fused expert layout is split as the per-expert one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "checkpoint_edit.h"
#include "loader_test_util.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/layers/moe.h"
#include "model/quant_config.h"
#include "model_oracle.h"
#include "vt/vt.h"

namespace vtllm::model {
namespace {

const std::string kModels = std::string(VTLLM_FIXTURES_DIR) + "/models/";

struct Block {
  std::string dir;
  Checkpoint ckpt;
  ModelConfig cfg;
  QuantConfig quant;
  vt::Queue q = vt::Queue::Cpu(1);

  explicit Block(const std::string& d)
      : dir(d), ckpt(Checkpoint::Open(d)), cfg(ModelConfig::FromDir(d)), quant(QuantConfig::FromDir(d)) {}

  // Layer 1's sparse block (every fixture here has one), rank tp's shard of it.
  SparseMoeBlock Load(const TensorParallel& tp) const {
    const LinearContext lc{&ckpt, &quant, vt::Device::Cpu(), &q};
    return SparseMoeBlock::Load(lc, "model.layers.1.mlp.",
                                {.hidden = cfg.hidden_size, .intermediate = cfg.moe_intermediate_size,
                                 .num_experts = cfg.num_experts, .top_k = cfg.num_experts_per_tok,
                                 .norm_topk_prob = cfg.norm_topk_prob,
                                 .shared_intermediate = cfg.shared_expert_intermediate_size},
                                tp);
  }

  // The block's F32 output for x [T, H].
  std::vector<float> Run(const SparseMoeBlock& b, const std::vector<float>& x) const {
    const int64_t H = cfg.hidden_size, T = static_cast<int64_t>(x.size()) / H;
    ActivationBuffers buf;
    const vt::Tensor out = vt::Tensor::Empty({T, H}, vt::DType::kF32);
    b.Forward(q, vt::Tensor::FromHost(x.data(), {T, H}, vt::DType::kF32), out, buf);
    q.Synchronize();
    return {out.data_as<float>(), out.data_as<float>() + T * H};
  }
};

std::vector<float> RandomInput(int64_t T, int64_t H) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T * H));
  for (float& v : x) v = nd(rng);
  return x;
}

// The ranks' outputs summed against the whole block's, for N = 2 and 4.
void CheckRanksSumToWholeBlock(const std::string& fixture, bool fp8, bool shared) {
  const Block b(kModels + fixture);
  ASSERT_TRUE(b.cfg.IsSparseLayer(1));
  ASSERT_EQ(b.cfg.shared_expert_intermediate_size > 0, shared);
  const SparseMoeBlock whole = b.Load({});
  ASSERT_EQ(whole.fp8(), fp8);
  const std::vector<float> x = RandomInput(19, b.cfg.hidden_size);
  const std::vector<float> want = b.Run(whole, x);
  double scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  ASSERT_GT(scale, 0.0);
  for (int n : {2, 4}) {
    std::vector<double> sum(want.size(), 0.0);
    int64_t rank_bytes = 0;
    for (int r = 0; r < n; ++r) {
      const SparseMoeBlock part = b.Load({r, n});
      EXPECT_EQ(part.fp8(), fp8);
      rank_bytes += part.weight_bytes();
      const std::vector<float> y = b.Run(part, x);
      for (size_t i = 0; i < y.size(); ++i) sum[i] += y[i];
    }
    // Every rank holds the router (and the shared gate), the rest is split n ways.
    EXPECT_LT(rank_bytes, n * whole.weight_bytes()) << fixture << " tp=" << n;
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(sum[i] - want[i]));
    std::printf("  %s block tp=%d: max |sum of ranks - whole| %.3g (max |out| %.3g)\n", fixture.c_str(), n, worst,
                scale);
    EXPECT_LE(worst, 2e-6 * scale) << fixture << " tp=" << n;
  }
}

TEST(TensorParallelMoe, Bf16ExpertsRanksSumToTheWholeBlock) {
  CheckRanksSumToWholeBlock("qwen3-moe-tiny", false, false);
}

TEST(TensorParallelMoe, SharedExpertRanksSumToTheWholeBlock) {
  // The shared expert's intermediate size is split too; its sigmoid gate, one factor per
  // token, multiplies each rank's part.
  CheckRanksSumToWholeBlock("qwen2-moe-tiny", false, true);
}

TEST(TensorParallelMoe, StaticFp8ExpertsRanksSumToTheWholeBlock) {
  // The input scales are the max over all experts' and each expert's gate/up is requantized
  // before slicing, so every rank quantizes its elements to the unsplit block's bytes.
  CheckRanksSumToWholeBlock("qwen3-moe-tiny-fp8", true, false);
}

TEST(TensorParallelMoe, UnsplittableBlocksAreErrors) {
  const Block b(kModels + "qwen2-moe-tiny");  // moe_intermediate_size 48, shared expert 96
  testing::ExpectError([&] { b.Load({0, 5}); }, {"moe_intermediate_size 48", "5 ranks"});
  Block online(kModels + "qwen3-moe-tiny");
  online.quant = ResolveQuantization(online.quant, "fp8", online.dir);
  testing::ExpectError([&] { online.Load({0, 2}); }, {"online FP8", "model.layers.1.mlp."});
}

TEST(TensorParallelMoe, FusedExpertsSplitAsThePerExpertLayout) {
  // transformers 5's experts.gate_up_proj [E, 2I, H] / experts.down_proj [E, H, I]: the same
  // experts, so each rank's logits are the per-expert checkpoint's bit for bit.
  testing::TempDir tmp;
  const std::string per_expert = kModels + "qwen3-moe-tiny";
  const std::string fused = testing::CopyWithFusedExperts(per_expert, tmp.path());
  LoadOptions o = testing::CpuOptions(vt::DType::kF32);
  o.cpu_threads = 1;
  o.tensor_parallel_size = 2;
  auto a = Model::Load(per_expert, o), b = Model::Load(fused, o);
  const std::vector<int32_t> prompt = {3, 140, 29, 301, 7, 7, 250};
  const std::vector<float> la = testing::PromptLogits(*a, prompt), lb = testing::PromptLogits(*b, prompt);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace vtllm::model
