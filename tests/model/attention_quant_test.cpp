// PagedAttentionQuantFp8 in the models: where a static-FP8 o_proj follows the attention
// (BF16 activations), the attention op writes o_proj's quantized input itself. Each model is
// loaded twice, fused (the default) and with LoadOptions::fuse_quant off, and runs a prompt
// and greedy decode steps: the fused op ran once per layer and forward, the unfused model
// never, and every logit is bit-identical between the two. On the CPU the op is its
// definition op by op: the fused model's only standalone quantizations are the op's own, one
// per layer and forward (the norms' and SiLU-mul's are fused too). The CUDA test checks that
// its decode kernels write the codes instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fused_logits.h"
#include "loader_test_util.h"
#include "model/config.h"
#include "model/models/decoder.h"
#include "model/quant_config.h"
#include "model_oracle.h"
#include "vt/registry.h"

namespace vtllm::model {
namespace {

using vt::DeviceType;
using vt::OpId;

int64_t Dispatches(OpId op) { return vt::DispatchCount(op, DeviceType::kCPU); }

void CheckAttentionQuantFused(const std::string& dir) {
  SCOPED_TRACE(dir);
  const std::vector<int32_t> prompt = {1, 7, 3, 12, 5, 9, 2};
  const int steps = 4;
  const int64_t L = ModelConfig::FromDir(dir).num_hidden_layers;
  LoadOptions opt = testing::CpuOptions(vt::DType::kBF16);
  std::vector<float> fused, unfused;
  int64_t quant_fused = 0, quant_unfused = 0;
  {
    auto model = Model::Load(dir, opt);
    ASSERT_EQ(model->quant().method, QuantMethod::kFp8Static);
    const int64_t op0 = Dispatches(OpId::kPagedAttentionQuantFp8), q0 = Dispatches(OpId::kQuantFp8Static);
    fused = testing::RunLogits(*model, prompt, steps);
    EXPECT_EQ(Dispatches(OpId::kPagedAttentionQuantFp8) - op0, L * steps);
    quant_fused = Dispatches(OpId::kQuantFp8Static) - q0;
  }
  opt.fuse_quant = false;
  {
    auto model = Model::Load(dir, opt);
    const int64_t op0 = Dispatches(OpId::kPagedAttentionQuantFp8), q0 = Dispatches(OpId::kQuantFp8Static);
    unfused = testing::RunLogits(*model, prompt, steps);
    EXPECT_EQ(Dispatches(OpId::kPagedAttentionQuantFp8) - op0, 0);
    quant_unfused = Dispatches(OpId::kQuantFp8Static) - q0;
  }
  EXPECT_EQ(quant_fused, L * steps);
  EXPECT_GE(quant_unfused, 3 * L * steps);  // each linear's input: qkv, o_proj, gate/up (and down)
  testing::ExpectSameLogits(fused, unfused);
}

// A dense ModelOpt checkpoint (make_random_checkpoint), compressed-tensors' static Llama and a
// ModelOpt Qwen3-MoE (the attention of every layer, sparse or dense).
TEST(AttentionQuantFp8, FusedLogitsEqualUnfused) {
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("qwen3");
  ASSERT_TRUE(testing::RunRandomCheckpoint(dir, "--preset qwen3-tiny --seed 5 --threads 2 --format fp8-modelopt"));
  CheckAttentionQuantFused(dir);
  const std::string models = std::string(VTLLM_FIXTURES_DIR) + "/models/";
  CheckAttentionQuantFused(models + "llama-ct-fp8");
  CheckAttentionQuantFused(models + "qwen3-moe-tiny-fp8");
}

// The op is part of a static-FP8 BF16 decoder's required list (CPU and CUDA both have it), and
// of no other.
TEST(AttentionQuantFp8, RequiredOnlyByStaticFp8Bf16) {
  QuantConfig fp8;
  fp8.method = QuantMethod::kFp8Static;
  const auto has = [](const std::vector<OpId>& ops) {
    return std::count(ops.begin(), ops.end(), OpId::kPagedAttentionQuantFp8);
  };
  EXPECT_EQ(has(DecoderOps(fp8, vt::DType::kBF16)), 1);
  EXPECT_EQ(has(MoeDecoderOps(fp8, vt::DType::kBF16)), 1);
  EXPECT_EQ(has(DecoderOps(fp8, vt::DType::kF32)), 0);
  EXPECT_EQ(has(DecoderOps(QuantConfig{}, vt::DType::kBF16)), 0);
}

}  // namespace
}  // namespace vtllm::model
