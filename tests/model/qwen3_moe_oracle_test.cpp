// Qwen3-MoE against Hugging Face: tests/fixtures/models/qwen3-moe-tiny (4 layers, 0 and 2
// dense via mlp_only_layers, 8 experts, 2 per token, norm_topk_prob) and -fp8 (the same
// model as ModelOpt static FP8 against an emulation of vLLM's FP8 MoE), both made by
// tools/oracle/moe_oracle.py on the GPU machine.
//
// With f32 activations the routing is decided on f32 logits as HF's is, so only summation
// orders differ: every position within 1e-4 (measured up to 3e-6). With BF16 activations
// a routing near-tie (this random model's smallest top-k gap is 4.5e-6, reference.json's
// router_min_gap) picks another expert at some later positions, which moves that
// position's logits by up to 1.7 (BF16 weights) or 1.6 (FP8) in these fixtures; so in BF16
// the bound is tight only at position 0 (measured 0.042-0.051 BF16, 0.24-0.40 FP8), loose
// over all positions, and the greedy tokens must agree up to the first near-tie (BF16) or
// for their first tokens (FP8: 5-20 of 20 measured).
#include "model_oracle.h"

namespace vtllm::model {
namespace {

const std::string kDir = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen3-moe-tiny";
const std::string kFp8Dir = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen3-moe-tiny-fp8";

TEST(Qwen3MoeOracle, F32ActivationsMatchHfFloat32) {
  auto model = Model::Load(kDir, testing::CpuOptions(vt::DType::kF32));
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 1e-4, .all_rows = 1e-4}, "qwen3 moe f32 act");
}

TEST(Qwen3MoeOracle, Bf16ModelMatchesHfFloat32) {
  auto model = Model::Load(kDir, testing::CpuOptions(vt::DType::kBF16));
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 0.1, .all_rows = 2.5, .near_tie = 0.3}, "qwen3 moe bf16");
}

TEST(Qwen3MoeOracle, ModelOptFp8MatchesTheEmulationAtEveryPosition) {
  auto model = Model::Load(kFp8Dir, testing::CpuOptions(vt::DType::kF32));
  testing::CheckAgainstOracle(*model, kFp8Dir, {.first_row = 1e-4, .all_rows = 1e-4}, "qwen3 moe fp8 / f32 act");
}

TEST(Qwen3MoeOracle, ModelOptFp8WithBf16ActivationsIsCloseToTheEmulation) {
  auto model = Model::Load(kFp8Dir, testing::CpuOptions(vt::DType::kBF16));
  testing::CheckAgainstOracle(*model, kFp8Dir,
                              {.first_row = 0.6, .all_rows = 2.5, .greedy_to_near_tie = false, .greedy_min_agree = 3},
                              "qwen3 moe fp8 / bf16 act");
}

}  // namespace
}  // namespace vtllm::model
