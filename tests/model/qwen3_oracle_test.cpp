// Qwen3 against Hugging Face: tests/fixtures/oracles/qwen3-tiny (3 layers, hidden 128,
// 4 query / 2 KV heads of 32, vocab 512, random weights; references in float32).
// The reference keeps the RoPE inverse frequencies in f32, as from_pretrained, vLLM and this
// engine do, so positions past 0 match as tightly as position 0.
#include "model_oracle.h"

namespace vtllm::model {
namespace {

const std::string kDir = std::string(VTLLM_FIXTURES_DIR) + "/oracles/qwen3-tiny";

TEST(Qwen3Oracle, Bf16WeightsF32ActivationsMatchHfFloat32) {
  // Same weights, same f32 arithmetic up to summation order: measured 1.9e-6 at position 0
  // and 5.7e-6 over every position (T up to 64); tolerance 1e-4 for both.
  auto model = Model::Load(kDir + "/bf16", testing::CpuOptions(vt::DType::kF32));
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 1e-4, .all_rows = 1e-4}, "qwen3 bf16 / f32 act");
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
