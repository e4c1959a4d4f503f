// Static FP8 (ModelOpt and compressed-tensors) of the hybrid Gated DeltaNet fixtures:
// `vtllm quantize` (QuantizeCheckpoint) writes qwen3-next-tiny, qwen3_5-tiny and
// qwen3_5-moe-tiny as static per-tensor FP8 W8A8, every GDN projection (in_proj_qkvz /
// in_proj_qkv, in_proj_z, in_proj_ba / in_proj_b, in_proj_a, out_proj) included, and the static
// path's f32 logits and greedy tokens are checked against a float64 emulation of vLLM's static
// FP8 math read from the written checkpoint (hybrid_fp8_reference.h, kStatic: merges take the
// largest scales, the other shards requantized). No HF run is involved: the HF-side oracle of a
// static FP8 hybrid (tools/oracle/gdn_moe_oracle.py --only fp8) is
// hybrid_fp8_oracle_test.cpp's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <vector>

#include "fused_logits.h"
#include "hybrid_fp8_reference.h"
#include "loader_test_util.h"
#include "model/models/hybrid.h"
#include "model/quant_config.h"
#include "model/quantize.h"
#include "model_oracle.h"
#include "vt/registry.h"

namespace vtllm::model {
namespace {

const std::string kFixtures = std::string(VTLLM_FIXTURES_DIR) + "/models/";

// Calibration windows: token ids from a fixed LCG over the vocabulary (not the test prompts).
QuantizeOptions Options(const std::string& format, int64_t vocab) {
  QuantizeOptions o;
  o.format = format;
  uint64_t s = 2718;
  for (int len : {48, 31, 64}) {
    std::vector<int32_t> ids;
    for (int i = 0; i < len; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      ids.push_back(static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(vocab)));
    }
    o.calibration.push_back(ids);
  }
  o.cpu_threads = 2;
  o.progress = false;
  return o;
}

// The GDN projections of layer 0 (a linear-attention layer in every fixture) are FP8 with
// scales; the router and the shared expert's gate stay BF16.
void CheckWritten(const std::string& out, bool fused) {
  const Checkpoint ck = Checkpoint::Open(out);
  const std::string p = "model.layers.0.linear_attn.";
  const std::vector<std::string> gdn =
      fused ? std::vector<std::string>{"in_proj_qkvz", "in_proj_ba", "out_proj"}
            : std::vector<std::string>{"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"};
  for (const std::string& n : gdn) {
    EXPECT_EQ(ck.Info(p + n + ".weight").dtype, vt::DType::kF8E4M3) << n;
    EXPECT_TRUE(ck.Has(p + n + ".weight_scale") && ck.Has(p + n + ".input_scale")) << n;
  }
  EXPECT_EQ(ck.Info(p + "conv1d.weight").dtype, vt::DType::kBF16);
  if (ck.Has("model.layers.0.mlp.gate.weight")) {
    EXPECT_EQ(ck.Info("model.layers.0.mlp.gate.weight").dtype, vt::DType::kBF16);
  }
}

// f32 logits against the emulation with the rule of online_fp8_hybrid_test.cpp: every prompt
// position agrees to 1e-4 until its first code flip (an activation on an e4m3 rounding boundary,
// amplified by these tiny random models and carried on by the GDN state), position 0 always,
// and at least `min_unflipped` of all positions come before a flip (measured: Qwen3-Next 132 of
// 189 in both layouts, max 1.3e-6; Qwen3.5 all 189, max 9.3e-6; Qwen3.5-MoE all 189). The
// emulation is far from the unquantized model (measured 4.4-5.1; checked >= 0.3), so a wrong
// merge, scale or row shows. Greedy decode steps of the short prompts: GreedyAgainstReference.
void CheckFormat(const std::string& name, const std::string& format, double min_unflipped) {
  SCOPED_TRACE(name + " " + format);
  const std::string src = kFixtures + name;
  const ModelConfig cfg = ModelConfig::FromDir(src);
  testing::TempDir tmp;
  const std::string out = tmp / "q";
  QuantizeCheckpoint(src, out, Options(format, cfg.vocab_size));
  CheckWritten(out, cfg.architecture == "Qwen3NextForCausalLM");
  auto model = Model::Load(out, testing::CpuOptions(vt::DType::kF32));
  ASSERT_EQ(model->quant().method, QuantMethod::kFp8Static);
  testing::HybridReference emu(out, testing::HybridMode::kStatic), exact(src, testing::HybridMode::kExact);
  const testing::EmulationComparison c = testing::CompareWithEmulation(*model, emu, exact, src);
  std::printf("[%s %s] static fp8 vs float64 emulation: max %.3g over %d positions before a flip, %d from there; "
              "emulation vs unquantized %.3g; %d greedy steps equal\n",
              name.c_str(), format.c_str(), c.worst, c.before, c.after, c.fp8_vs_exact, c.greedy_steps);
  EXPECT_EQ(c.flipped_at_0.size(), 0u);
  EXPECT_GE(c.before, min_unflipped * (c.before + c.after));
  EXPECT_GE(c.fp8_vs_exact, 0.3);
  EXPECT_GE(c.greedy_steps, 4);
}

// BF16 activations: the static FP8 recipes that fuse a step with the next linear's input
// quantization run, and the logits are bit-identical to the same checkpoint loaded with the
// fused recipes off (the step, then the standalone quantizer). Dispatches per forward:
// - RmsNormZeroCentredQuantFp8: two per layer, the input norm (with the input scale that a GDN
//   layer's q/k/v/z or an attention layer's q/k/v/gate share) and the post-attention norm (with
//   the experts' or the MLP's);
// - RmsNormGatedQuantFp8: one per GDN layer, the gated norm with out_proj's;
// - MatmulFp8SiluMulQuantFp8: one per layer, the dense MLP's or the shared expert's gate/up
//   product, SiLU-mul and down input quantization.
// With the recipes off none of the three runs, and QuantFp8Static runs once more for each
// recipe run it replaced.
void CheckFusedRecipes(const std::string& name) {
  SCOPED_TRACE(name);
  const std::string src = kFixtures + name;
  const ModelConfig cfg = ModelConfig::FromDir(src);
  testing::TempDir tmp;
  const std::string out = tmp / "q";
  QuantizeCheckpoint(src, out, Options("modelopt", cfg.vocab_size));
  const std::vector<int32_t> prompt = {1, 7, 3, 12, 5, 9, 2};
  const int steps = 4;
  int64_t gdn = 0;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) gdn += cfg.IsLinearAttentionLayer(l) ? 1 : 0;
  ASSERT_GT(gdn, 0);
  using vt::OpId;
  // The three recipes, then the standalone quantizer.
  const OpId ops[] = {OpId::kRmsNormZeroCentredQuantFp8, OpId::kRmsNormGatedQuantFp8,
                      OpId::kMatmulFp8SiluMulQuantFp8, OpId::kQuantFp8Static};
  const int64_t per_forward[] = {2 * cfg.num_hidden_layers, gdn, cfg.num_hidden_layers};
  const size_t recipes = std::size(per_forward);
  // The dispatches of each of `ops` while `model` runs the prompt and its decode steps.
  const auto run = [&](Model& model, std::vector<int64_t>& counts) {
    std::vector<int64_t> before;
    for (OpId op : ops) before.push_back(vt::DispatchCount(op, vt::DeviceType::kCPU));
    std::vector<float> logits = testing::RunLogits(model, prompt, steps);
    for (size_t i = 0; i < std::size(ops); ++i)
      counts.push_back(vt::DispatchCount(ops[i], vt::DeviceType::kCPU) - before[i]);
    return logits;
  };
  LoadOptions opt = testing::CpuOptions(vt::DType::kBF16);
  std::vector<float> fused, unfused;
  std::vector<int64_t> fused_counts, unfused_counts;
  {
    auto model = Model::Load(out, opt);
    fused = run(*model, fused_counts);
  }
  opt.fuse_quant = false;
  {
    auto model = Model::Load(out, opt);
    unfused = run(*model, unfused_counts);
  }
  int64_t replaced = 0;
  for (size_t i = 0; i < recipes; ++i) {
    EXPECT_EQ(fused_counts[i], per_forward[i] * steps) << vt::OpName(ops[i]);
    EXPECT_EQ(unfused_counts[i], 0) << vt::OpName(ops[i]);
    replaced += fused_counts[i];
  }
  // Each recipe run stands for one standalone quantization.
  EXPECT_EQ(unfused_counts[recipes] - fused_counts[recipes], replaced);
  testing::ExpectSameLogits(fused, unfused);
}

TEST(StaticFp8Hybrid, FusedRecipesMatchTheSteps) {
  for (const char* name : {"qwen3-next-tiny", "qwen3_5-tiny", "qwen3_5-moe-tiny"}) CheckFusedRecipes(name);
}

// The gated-norm recipe is on the load's required list of a static-FP8 hybrid with BF16
// activations, and of no other.
TEST(StaticFp8Hybrid, GatedNormRecipeRequiredOnlyByStaticFp8Bf16) {
  QuantConfig fp8;
  fp8.method = QuantMethod::kFp8Static;
  QuantConfig block;
  block.method = QuantMethod::kFp8Block;
  const auto has = [](const std::vector<vt::OpId>& ops) {
    return std::count(ops.begin(), ops.end(), vt::OpId::kRmsNormGatedQuantFp8);
  };
  EXPECT_EQ(has(HybridDecoderOps(fp8, vt::DType::kBF16)), 1);
  EXPECT_EQ(has(HybridDecoderOps(fp8, vt::DType::kF32)), 0);
  EXPECT_EQ(has(HybridDecoderOps(block, vt::DType::kBF16)), 0);
  EXPECT_EQ(has(HybridDecoderOps(QuantConfig{}, vt::DType::kBF16)), 0);
}

TEST(StaticFp8Hybrid, Qwen3NextModelOpt) { CheckFormat("qwen3-next-tiny", "modelopt", 0.5); }
TEST(StaticFp8Hybrid, Qwen3NextCompressedTensors) { CheckFormat("qwen3-next-tiny", "compressed-tensors", 0.5); }
TEST(StaticFp8Hybrid, Qwen35ModelOpt) { CheckFormat("qwen3_5-tiny", "modelopt", 0.5); }
TEST(StaticFp8Hybrid, Qwen35CompressedTensors) { CheckFormat("qwen3_5-tiny", "compressed-tensors", 0.5); }
TEST(StaticFp8Hybrid, Qwen35MoeModelOpt) { CheckFormat("qwen3_5-moe-tiny", "modelopt", 0.5); }
TEST(StaticFp8Hybrid, Qwen35MoeCompressedTensors) { CheckFormat("qwen3_5-moe-tiny", "compressed-tensors", 0.5); }

}  // namespace
}  // namespace vtllm::model
