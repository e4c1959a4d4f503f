// Qwen2-MoE against Hugging Face: tests/fixtures/models/qwen2-moe-tiny (3 layers, layer 0
// dense via mlp_only_layers, 8 experts, 2 per token, norm_topk_prob false, q/k/v biases, and
// in each sparse layer a shared expert scaled by sigmoid(x . shared_expert_gate)), made by
// tools/oracle/qwen2_moe_oracle.py on the GPU machine. The f32 bound is the MoE fixtures'
// (routing on f32 logits as HF's); BF16 activations as for qwen3-moe-tiny (a routing
// near-tie may pick another expert at later positions).
#include "model_oracle.h"

namespace vtllm::model {
namespace {

const std::string kDir = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen2-moe-tiny";

TEST(Qwen2MoeOracle, F32ActivationsMatchHfFloat32) {
  auto model = Model::Load(kDir, testing::CpuOptions(vt::DType::kF32));
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 1e-4, .all_rows = 1e-4}, "qwen2 moe f32 act");
}

TEST(Qwen2MoeOracle, Bf16ModelMatchesHfFloat32) {
  auto model = Model::Load(kDir, testing::CpuOptions(vt::DType::kBF16));
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 0.1, .all_rows = 2.5, .near_tie = 0.3}, "qwen2 moe bf16");
}

}  // namespace
}  // namespace vtllm::model
