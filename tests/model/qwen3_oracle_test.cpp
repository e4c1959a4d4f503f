// Qwen3 against Hugging Face: tests/fixtures/oracles/qwen3-tiny (3 layers, hidden 128,
// 4 query / 2 KV heads of 32, vocab 512, random weights; references in float32).
//
// About that reference's RoPE: its inverse frequencies went through BF16 (the generator
// cast the whole module, buffers included, as `model.to(bfloat16)` does), while
// from_pretrained, vLLM and this engine keep them in f32. A float64 re-computation of the
// reference from the checkpoint agrees with it to 1.6e-6 with BF16-rounded frequencies and
// differs by exactly what this engine measures with f32 ones (3.4e-4 at T=5, 0.017 at T=64,
// growing with the position). Position 0 is unrotated, so there the tolerance is tight.
#include "model_oracle.h"

namespace vtllm::model {
namespace {

const std::string kDir = std::string(VTLLM_FIXTURES_DIR) + "/oracles/qwen3-tiny";

TEST(Qwen3Oracle, Bf16WeightsF32ActivationsMatchHfFloat32) {
  // Same weights, same f32 arithmetic up to summation order: measured 1.6e-6 at position 0
  // (tolerance 1e-4); over all positions the reference's BF16 RoPE frequencies dominate:
  // measured 0.0171 at T=64 (tolerance 0.03).
  auto model = Model::Load(kDir + "/bf16", testing::CpuOptions(vt::DType::kF32));
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 1e-4, .all_rows = 0.03}, "qwen3 bf16 / f32 act");
}

TEST(Qwen3Oracle, Bf16ModelMatchesHfFloat32) {
  // BF16 activations round every hidden state, q/k/v, attention output and MLP activation
  // to 8 significant bits (relative 2^-9 per rounding, ~20 roundings per layer, 3 layers):
  // measured 0.031 at position 0 and 0.054 overall with logits up to 4.3 (tolerance 0.1).
  auto model = Model::Load(kDir + "/bf16", testing::CpuOptions(vt::DType::kBF16));
  // Greedy tokens up to the first reference margin below 0.3 (see qwen2_oracle_test.cpp).
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 0.1, .all_rows = 0.1, .near_tie = 0.3}, "qwen3 bf16");
}

}  // namespace
}  // namespace vtllm::model
