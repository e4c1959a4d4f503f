// The per-token-group fused recipes in the models (BF16 activations): where a block-FP8 or
// per-channel FP8 linear (or the group-scaled MoE experts) follows an RMSNorm, a Gated
// DeltaNet's gated RMSNorm, a hybrid's zero-centred RMSNorm or a SiLU-mul, the model runs
// RmsNormQuantFp8PerTokenGroup, RmsNormGatedQuantFp8PerTokenGroup,
// RmsNormZeroCentredQuantFp8PerTokenGroup or SiluMulQuantFp8PerTokenGroup and hands the linear the
// quantized activation. Each model is loaded twice, fused (the default) and with
// LoadOptions::fuse_quant off, and runs a prompt and greedy decode steps: the fused ops ran the
// expected number of times (and the standalone quantizer that many times less), the unfused
// model ran none of them, and every logit is bit-identical between the two.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "fused_logits.h"
#include "hybrid_fp8_copy.h"
#include "loader_test_util.h"
#include "model/config.h"
#include "model/models/decoder.h"
#include "model/models/decoder_parts.h"
#include "model/models/hybrid.h"
#include "model/quant_config.h"
#include "model_oracle.h"
#include "vt/registry.h"

namespace vtllm::model {
namespace {

using vt::OpId;

const std::string kModels = std::string(VTLLM_FIXTURES_DIR) + "/models/";

// Dispatches of the CPU kernels of interest since construction.
struct Counts {
  static constexpr OpId kOps[] = {OpId::kRmsNormQuantFp8PerTokenGroup, OpId::kRmsNormGatedQuantFp8PerTokenGroup,
                                  OpId::kSiluMulQuantFp8PerTokenGroup, OpId::kQuantFp8PerTokenGroup,
                                  OpId::kRmsNormZeroCentredQuantFp8PerTokenGroup};
  static constexpr int kN = static_cast<int>(std::size(kOps));
  int64_t start[kN];
  Counts() {
    for (int i = 0; i < kN; ++i) start[i] = vt::DispatchCount(kOps[i], vt::DeviceType::kCPU);
  }
  int64_t Since(OpId op) const {
    for (int i = 0; i < kN; ++i)
      if (kOps[i] == op) return vt::DispatchCount(op, vt::DeviceType::kCPU) - start[i];
    return -1;
  }
};

// Per forward, how many times each fused op must run, and the standalone quantizer's runs
// that the fusion removes.
struct Expected {
  int64_t rms = 0, gated = 0, silu = 0, zero_centred = 0;
};

void CheckFusedMatchesUnfused(const std::string& label, const std::string& dir, QuantMethod method,
                              const Expected& per_forward) {
  SCOPED_TRACE(label);
  const std::vector<int32_t> prompt = {1, 7, 3, 12, 5, 9, 2};
  const int steps = 4;  // the prompt's forward and 3 decode steps
  LoadOptions opt = testing::CpuOptions(vt::DType::kBF16);
  std::vector<float> fused, unfused;
  int64_t quant_fused = 0, quant_unfused = 0;
  {
    auto model = Model::Load(dir, opt);
    ASSERT_EQ(model->quant().method, method);
    const Counts c;
    fused = testing::RunLogits(*model, prompt, steps);
    EXPECT_EQ(c.Since(OpId::kRmsNormQuantFp8PerTokenGroup), per_forward.rms * steps);
    EXPECT_EQ(c.Since(OpId::kRmsNormGatedQuantFp8PerTokenGroup), per_forward.gated * steps);
    EXPECT_EQ(c.Since(OpId::kSiluMulQuantFp8PerTokenGroup), per_forward.silu * steps);
    EXPECT_EQ(c.Since(OpId::kRmsNormZeroCentredQuantFp8PerTokenGroup), per_forward.zero_centred * steps);
    quant_fused = c.Since(OpId::kQuantFp8PerTokenGroup);
  }
  opt.fuse_quant = false;
  {
    auto model = Model::Load(dir, opt);
    const Counts c;
    unfused = testing::RunLogits(*model, prompt, steps);
    EXPECT_EQ(c.Since(OpId::kRmsNormQuantFp8PerTokenGroup), 0);
    EXPECT_EQ(c.Since(OpId::kRmsNormGatedQuantFp8PerTokenGroup), 0);
    EXPECT_EQ(c.Since(OpId::kSiluMulQuantFp8PerTokenGroup), 0);
    EXPECT_EQ(c.Since(OpId::kRmsNormZeroCentredQuantFp8PerTokenGroup), 0);
    quant_unfused = c.Since(OpId::kQuantFp8PerTokenGroup);
  }
  // Each fused op stands for one standalone quantization.
  EXPECT_EQ(quant_unfused - quant_fused,
            (per_forward.rms + per_forward.gated + per_forward.silu + per_forward.zero_centred) * steps);
  testing::ExpectSameLogits(fused, unfused);
}

// qwen3-fp8-block-tiny: 128 x 128 blocks over hidden 192 (a whole and a partial group); each
// layer fuses its two RMSNorms (attention and MLP inputs) and its SiLU-mul.
TEST(FusedGroupQuant, Qwen3BlockFp8) {
  const std::string dir = kModels + "qwen3-fp8-block-tiny";
  const int64_t L = ModelConfig::FromDir(dir).num_hidden_layers;
  CheckFusedMatchesUnfused("qwen3 block", dir, QuantMethod::kFp8Block, {2 * L, 0, L});
}

// qwen3-fp8-dynamic-tiny: per-channel weights, one group per token row.
TEST(FusedGroupQuant, Qwen3PerChannelFp8) {
  const std::string dir = kModels + "qwen3-fp8-dynamic-tiny";
  const int64_t L = ModelConfig::FromDir(dir).num_hidden_layers;
  CheckFusedMatchesUnfused("qwen3 channel", dir, QuantMethod::kFp8ChannelToken, {2 * L, 0, L});
}

// make_random_checkpoint's qwen3-tiny in fp8-block (hidden 128, intermediate 384: whole
// 128-column groups) and its qwen3-next-tiny (a MoE hybrid whose every sparse layer has a
// shared expert, block FP8 as the release stores it: experts and shared experts too; value
// heads of 40, so out_proj's 128-column groups straddle heads and the gated norm stays apart;
// each layer's zero-centred norm ahead of its MoE block fuses with the experts' quantization,
// and each layer's input norm with the one quantization its token mixer's projections share:
// a GDN layer's q/k/v/z row blocks, an attention layer's q/k/v and gate).
TEST(FusedGroupQuant, RandomCheckpointsBlockFp8) {
  {
    testing::TempDir tmp;
    const std::string dir = tmp.Sub("qwen3");
    ASSERT_TRUE(testing::RunRandomCheckpoint(dir, "--preset qwen3-tiny --seed 3 --threads 2 --format fp8-block"));
    const int64_t L = ModelConfig::FromDir(dir).num_hidden_layers;
    CheckFusedMatchesUnfused("random qwen3-tiny block", dir, QuantMethod::kFp8Block, {2 * L, 0, L});
  }
  {
    testing::TempDir tmp;
    const std::string dir = tmp.Sub("next");
    ASSERT_TRUE(testing::RunRandomCheckpoint(dir, "--preset qwen3-next-tiny --seed 3 --threads 2 --format fp8-block"));
    const ModelConfig cfg = ModelConfig::FromDir(dir);
    int64_t mlps = 0;
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
      mlps += !cfg.IsSparseLayer(l) || cfg.shared_expert_intermediate_size > 0 ? 1 : 0;
    ASSERT_GT(mlps, 0);
    CheckFusedMatchesUnfused("random qwen3-next-tiny block", dir, QuantMethod::kFp8Block,
                             {0, 0, mlps, 2 * cfg.num_hidden_layers});
  }
}

// Qwen3-MoE with block-FP8 and per-channel experts (layer 0 dense, layer 1 sparse): the
// sparse layer's post-attention norm also writes the router's BF16 input, and the experts
// take the fused op's x8 and scales.
TEST(FusedGroupQuant, Qwen3MoeGroupScaledExperts) {
  for (const char* name : {"qwen3-moe-fp8-block-tiny", "qwen3-moe-fp8-dynamic-tiny"}) {
    const std::string dir = kModels + name;
    const ModelConfig cfg = ModelConfig::FromDir(dir);
    int64_t sparse = 0;
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) sparse += cfg.IsSparseLayer(l) ? 1 : 0;
    ASSERT_GT(sparse, 0);
    const int64_t L = cfg.num_hidden_layers, dense = L - sparse;
    const Counts c;
    CheckFusedMatchesUnfused(name, dir, std::string(name).find("block") != std::string::npos
                                            ? QuantMethod::kFp8Block
                                            : QuantMethod::kFp8ChannelToken,
                             {2 * L, 0, dense});
    EXPECT_GT(c.Since(OpId::kRmsNormQuantFp8PerTokenGroup), 0);
  }
}

// The hybrid (Gated DeltaNet) qwen3_5-tiny in block FP8 of 32 x 32: value heads of 32, so each
// GDN layer's gated norm fuses with out_proj's quantization; the MLPs fuse their SiLU-mul and
// the zero-centred RMSNorm ahead of them, and each layer's input norm fuses with the one
// quantization of its token mixer's projections (in_proj_qkvz, or q/k/v/gate). Per-channel:
// out_proj's one group per token spans the value heads, so the gated norms stay apart.
TEST(FusedGroupQuant, HybridQwen35) {
  const std::string src = kModels + "qwen3_5-tiny";
  const ModelConfig cfg = ModelConfig::FromDir(src);
  int64_t gdn = 0;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) gdn += cfg.IsLinearAttentionLayer(l) ? 1 : 0;
  ASSERT_GT(gdn, 0);
  ASSERT_EQ(cfg.linear_value_head_dim % 32, 0);
  const int64_t L = cfg.num_hidden_layers;
  {
    testing::TempDir tmp;
    const std::string dir = testing::QuantizedCopy(src, tmp, {32, 32});
    CheckFusedMatchesUnfused("qwen3_5 block 32", dir, QuantMethod::kFp8Block, {0, gdn, L, 2 * L});
  }
  {
    testing::TempDir tmp;
    const std::string dir = testing::QuantizedCopy(src, tmp, {});
    CheckFusedMatchesUnfused("qwen3_5 channel", dir, QuantMethod::kFp8ChannelToken, {0, 0, L, 2 * L});
  }
}

// The fused recipes are optional: a device without them still loads the model (the load's
// strict list does not name them) and runs the steps apart.
TEST(FusedGroupQuant, FusedOpsAreOptionalAtLoad) {
  QuantConfig block;
  block.method = QuantMethod::kFp8Block;
  const std::vector<OpId> optional = FusedGroupQuantOps(block, vt::DType::kBF16);
  ASSERT_EQ(optional.size(), 4u);
  for (const auto& required : {DecoderOps(block, vt::DType::kBF16), MoeDecoderOps(block, vt::DType::kBF16),
                               HybridDecoderOps(block, vt::DType::kBF16)})
    for (OpId op : optional) EXPECT_EQ(std::count(required.begin(), required.end(), op), 0) << vt::OpName(op);
  EXPECT_TRUE(FusedGroupQuantOps(block, vt::DType::kF32).empty());
  QuantConfig fp8_static;
  fp8_static.method = QuantMethod::kFp8Static;
  EXPECT_TRUE(FusedGroupQuantOps(fp8_static, vt::DType::kBF16).empty());
}

}  // namespace
}  // namespace vtllm::model
