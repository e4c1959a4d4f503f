// Llama against Hugging Face: tests/fixtures/models/llama-tiny (2 layers, hidden 128,
// 4 query / 2 KV heads of 32, vocab 448, llama3 RoPE scaling with factor 8 and an original
// context of 64, so the prompts of up to 61 tokens plus 20 generated cross the scaled band).
// Reference: float32 HF forward of the bf16 checkpoint (tools/oracle/model_oracle.py).
#include "model_oracle.h"

namespace vtllm::model {
namespace {

const std::string kDir = std::string(VTLLM_FIXTURES_DIR) + "/models/llama-tiny";

TEST(LlamaOracle, F32ActivationsMatchHfFloat32) {
  // Same bf16 weights and f32 arithmetic, differing only in summation order and in the
  // cos/sin of the rope angles (f32 libm vs double rounded once): measured max 7e-6
  // (tolerance 1e-4, ~30x the measurement, far below the 1e-2 near-tie threshold).
  auto model = Model::Load(kDir, testing::CpuOptions(vt::DType::kF32));
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 1e-4, .all_rows = 1e-4}, "llama f32 act");
}

TEST(LlamaOracle, Bf16ModelMatchesHfFloat32) {
  // BF16 activations: every hidden state, q/k/v, attention output and MLP activation is
  // rounded to 8 significant bits; measured max 0.05 at position 0 and 0.1 overall on logits
  // of magnitude ~9 (tolerances 0.1 and 0.2).
  // The greedy comparison runs up to the first reference margin below 0.3, twice the largest
  // BF16 logit error measured on these fixtures (0.14): a smaller margin may flip.
  auto model = Model::Load(kDir, testing::CpuOptions(vt::DType::kBF16));
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 0.1, .all_rows = 0.2, .near_tie = 0.3}, "llama bf16");
}

TEST(LlamaOracle, LoadsWithRopeScalingFromConfig) {
  auto model = Model::Load(kDir, testing::CpuOptions(vt::DType::kF32));
  EXPECT_EQ(model->config().rope_scaling.type, "llama3");
  EXPECT_EQ(model->config().rope_scaling.original_max_position_embeddings, 64);
}

}  // namespace
}  // namespace vtllm::model
