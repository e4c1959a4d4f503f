// Qwen2 against Hugging Face: tests/fixtures/models/qwen2-tiny (2 layers, hidden 96, 6 query /
// 2 KV heads of 16, q/k/v biases drawn at random, tied embeddings: the checkpoint has no
// lm_head.weight). Reference: float32 HF forward of the bf16 checkpoint.
#include "model_oracle.h"

namespace vtllm::model {
namespace {

const std::string kDir = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen2-tiny";

TEST(Qwen2Oracle, F32ActivationsMatchHfFloat32) {
  // Measured max 8e-6; tolerance 1e-4 (see llama_oracle_test.cpp for what differs).
  auto model = Model::Load(kDir, testing::CpuOptions(vt::DType::kF32));
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 1e-4, .all_rows = 1e-4}, "qwen2 f32 act");
}

TEST(Qwen2Oracle, Bf16ModelMatchesHfFloat32) {
  // BF16 activations: measured max 0.05 at position 0 and 0.14 overall on logits of
  // magnitude ~8 (tolerances 0.1 and 0.2).
  // The greedy comparison runs up to the first reference margin below 0.3, twice the largest
  // BF16 logit error measured on these fixtures (0.14): a smaller margin may flip.
  auto model = Model::Load(kDir, testing::CpuOptions(vt::DType::kBF16));
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 0.1, .all_rows = 0.2, .near_tie = 0.3}, "qwen2 bf16");
}

}  // namespace
}  // namespace vtllm::model
