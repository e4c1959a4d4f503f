// compressed-tensors FP8 (static per-tensor W8A8, scales of shape [1], lm_head ignored):
// tests/fixtures/models/llama-ct-fp8 against float32 emulations written by
// tools/oracle/model_oracle.py. reference.json merges q/k/v and gate/up as vLLM does (and
// as this engine does); reference_per_projection.json keeps each projection's scales.
#include "model_oracle.h"

namespace vtllm::model {
namespace {

const std::string kDir = std::string(VTLLM_FIXTURES_DIR) + "/models/llama-ct-fp8";

TEST(LlamaFp8Oracle, CompressedTensorsMatchesMergedEmulation) {
  // F32 activations quantize exactly as the emulation does (x * (1/s), clamp, RNE), and the
  // requantized merged weights are byte-identical to the emulation's; what remains is the
  // GEMM's f32 accumulation order against the emulation's float64 GEMM, which can flip an
  // activation's fp8 rounding in a later layer. Measured max 4.3e-6; tolerance 1e-3.
  auto model = Model::Load(kDir, testing::CpuOptions(vt::DType::kF32));
  EXPECT_EQ(model->quant().format, "compressed-tensors");
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 1e-3, .all_rows = 1e-3}, "llama ct fp8 f32 act");
}

TEST(LlamaFp8Oracle, Bf16ModelStaysCloseToMergedEmulation) {
  // The BF16 model rounds activations to BF16 before quantizing (the fused RMSNorm/SiLU +
  // FP8 recipes), which moves some fp8 codes by one step: measured on logits of
  // magnitude ~9 (0.3 at position 0, 0.5 overall; tolerances 0.5 and 0.8); greedy tokens
  // are compared up to the first reference margin below 1.0, twice the largest error.
  auto model = Model::Load(kDir, testing::CpuOptions(vt::DType::kBF16));
  testing::CheckAgainstOracle(*model, kDir, {.first_row = 0.5, .all_rows = 0.8, .near_tie = 1.0},
                              "llama ct fp8 bf16");
}

TEST(LlamaFp8Oracle, MergingDiffersFromPerProjectionScales) {
  // How far vLLM's merge moves this model from per-projection scales (information for the
  // tolerance of the ModelOpt test against its per-projection reference).
  auto model = Model::Load(kDir, testing::CpuOptions(vt::DType::kF32));
  testing::CheckAgainstOracle(*model, kDir,
                              {.first_row = 1.0, .all_rows = 1.0, .greedy_to_near_tie = false, .greedy_min_agree = 0},
                              "llama ct fp8 vs per-projection", "reference_per_projection.json");
}

}  // namespace
}  // namespace vtllm::model
