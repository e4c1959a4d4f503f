// Online FP8 (`--quantization fp8`) of mixture-of-experts checkpoints: the routed experts are
// quantized at load, one weight scale per expert over its merged gate/up rows and one over its
// down rows, and run with per-token activation scales (MoeExpertsFp8PerToken). Checked
// against a float64 emulation of that definition built in the test (fp8_reference_forward.h,
// the e4m3 grid by enumeration), against the BF16 model's greedy tokens, and by what was
// loaded and run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstring>
#include <filesystem>

#include "checkpoint_edit.h"
#include "fp8_reference_forward.h"
#include "online_fp8_check.h"
#include "loader_test_util.h"
#include "model/safetensors_writer.h"
#include "model_oracle.h"
#include "vt/error.h"
#include "vt/registry.h"

namespace vtllm::model {
namespace {

const std::string kFixtures = std::string(VTLLM_FIXTURES_DIR) + "/models/";
const std::string kMoe = kFixtures + "qwen3-moe-tiny";  // layers 1 and 3 sparse: 8 experts, 2 per token

LoadOptions Online(vt::DType dtype) { return testing::OnlineFp8Options(dtype); }

// Float32 activations against the float64 emulation, with the dense test's bounds
// (online_fp8_check.h).
TEST(OnlineFp8Moe, MatchesTheFloat64EmulationUpToCodeFlips) {
  testing::ExpectOnlineFp8MatchesEmulation(kMoe, 0.1);
}

// Greedy decoding (prefill, then one token per step through the KV cache) picks the BF16
// model's tokens (the HF float32 oracle's) up to the first step where the FP8 math itself
// may pick another: on this tiny random model FP8 moves the top-two margin by up to about 1
// (measured), as much as the margins, so where that is is read off the float64 emulation of
// the format along the oracle's tokens: the first step whose emulated top-1 is not the
// oracle's or is within 1e-2 of the runner-up (or the oracle's own margin is under 1e-2).
TEST(OnlineFp8Moe, GreedyTokensEqualTheBf16ModelsUpToTheFirstNearTie) {
  auto fp8 = Model::Load(kMoe, Online(vt::DType::kF32));
  testing::ReferenceForward emu(kMoe, testing::RefMode::kOnlineFp8);
  const int64_t V = fp8->vocab_size();
  size_t compared = 0;
  const std::vector<testing::OracleCase> cases = testing::ReadOracle(kMoe);
  for (size_t i = 0; i < cases.size(); ++i) {
    const testing::OracleCase& c = cases[i];
    std::vector<int32_t> path = c.prompt;  // the prompt and the oracle's tokens but the last
    path.insert(path.end(), c.greedy.begin(), c.greedy.end() - 1);
    const std::vector<double> ref = emu.Logits(path);
    size_t n = 0;
    for (; n < c.greedy.size(); ++n) {
      const double* row = ref.data() + (c.prompt.size() - 1 + n) * V;
      std::vector<double> sorted(row, row + V);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      const int64_t top = std::max_element(row, row + V) - row;
      if (top != c.greedy[n] || sorted[0] - sorted[1] < 1e-2 || c.margins[n] < 1e-2) break;
    }
    const std::vector<int32_t> got = testing::GreedyTokens(*fp8, c.prompt, static_cast<int>(c.greedy.size()));
    std::printf("case %zu: the FP8 math keeps the BF16 tokens for %zu steps\n", i, n);
    for (size_t s = 0; s < n; ++s) ASSERT_EQ(got[s], c.greedy[s]) << "case " << i << " step " << s;
    compared += n;
  }
  EXPECT_GE(compared, 10u) << "too few steps before a near-tie for the comparison to mean anything";
}

// The bytes a token reads (Model::weight_bytes: embeddings, norms, lm_head, attention, and
// per sparse layer the router, top_k routed experts and the shared expert) that online FP8
// saves when every decoder linear and routed expert is FP8 and nothing else is: a linear of
// [N, K] saves N K bytes and gains N f32 scales; an expert saves one byte a weight (its two
// scales are not counted); routers, the shared expert's gate, norms and lm_head save none.
int64_t Fp8BytesSaved(const ModelConfig& c) {
  const int64_t H = c.hidden_size, D = c.head_dim, Ie = c.moe_intermediate_size;
  auto linear = [](int64_t n, int64_t k) { return n * k - 4 * n; };
  auto mlp = [&](int64_t i) { return linear(2 * i, H) + linear(H, i); };
  const int64_t qkv = (c.num_attention_heads + 2 * c.num_key_value_heads) * D;
  int64_t saved = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    saved += linear(qkv, H) + linear(H, c.num_attention_heads * D);
    if (!c.IsSparseLayer(l)) {
      saved += mlp(c.intermediate_size);
      continue;
    }
    saved += c.num_experts_per_tok * 3 * H * Ie;
    if (c.shared_expert_intermediate_size > 0) saved += mlp(c.shared_expert_intermediate_size);
  }
  return saved;
}

// The routed experts are FP8 (1 byte a weight) while the routers keep their BF16 bytes, and
// a forward runs MoeExpertsFp8PerToken once per sparse layer, never the BF16 expert op.
TEST(OnlineFp8Moe, ExpertsAreFp8AndRunThePerTokenOp) {
  auto bf16 = Model::Load(kMoe, testing::CpuOptions(vt::DType::kF32));
  auto fp8 = Model::Load(kMoe, Online(vt::DType::kF32));
  const ModelConfig& c = bf16->config();
  int64_t sparse = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) sparse += c.IsSparseLayer(l);
  ASSERT_EQ(sparse, 2);
  EXPECT_EQ(bf16->weight_bytes() - fp8->weight_bytes(), Fp8BytesSaved(c));

  const int64_t per_token = vt::DispatchCount(vt::OpId::kMoeExpertsFp8PerToken, vt::DeviceType::kCPU);
  const int64_t plain = vt::DispatchCount(vt::OpId::kMoeExperts, vt::DeviceType::kCPU);
  const std::vector<float> logits = testing::PromptLogits(*fp8, {5, 77, 300, 12});
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  EXPECT_EQ(vt::DispatchCount(vt::OpId::kMoeExpertsFp8PerToken, vt::DeviceType::kCPU) - per_token, sparse);
  EXPECT_EQ(vt::DispatchCount(vt::OpId::kMoeExperts, vt::DeviceType::kCPU), plain);
}

// The same experts stored fused (transformers 5: experts.gate_up_proj [E, 2I, H],
// experts.down_proj [E, H, I]) quantize to the same bytes, so the logits are identical.
TEST(OnlineFp8Moe, FusedExpertsGiveThePerExpertLayoutsLogits) {
  testing::TempDir tmp;
  testing::CopyWithFusedExperts(kMoe, tmp.path());
  auto per_expert = Model::Load(kMoe, Online(vt::DType::kF32));
  auto fused = Model::Load(tmp.path(), Online(vt::DType::kF32));
  const std::vector<int32_t> prompt = {3, 140, 29, 301, 7, 7, 250};
  const std::vector<float> a = testing::PromptLogits(*per_expert, prompt), b = testing::PromptLogits(*fused, prompt);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

// Qwen2-MoE: the shared expert's projections are linears (online FP8 like any other) and its
// sigmoid gate, like the router, stays as stored; the result is close to the BF16 model.
TEST(OnlineFp8Moe, SharedExpertModelsLoadAndStayCloseToBf16) {
  const std::string dir = kFixtures + "qwen2-moe-tiny";
  auto bf16 = Model::Load(dir, testing::CpuOptions(vt::DType::kF32));
  auto fp8 = Model::Load(dir, Online(vt::DType::kF32));
  const int64_t before = vt::DispatchCount(vt::OpId::kMoeExpertsFp8PerToken, vt::DeviceType::kCPU);
  const testing::OracleCase c = testing::ReadOracle(dir).back();
  const std::vector<float> got = testing::PromptLogits(*fp8, c.prompt), want = testing::PromptLogits(*bf16, c.prompt);
  EXPECT_GT(vt::DispatchCount(vt::OpId::kMoeExpertsFp8PerToken, vt::DeviceType::kCPU), before);
  EXPECT_EQ(bf16->weight_bytes() - fp8->weight_bytes(), Fp8BytesSaved(bf16->config()));
  const testing::LogitError e = testing::CompareLogits(got, want);
  std::printf("qwen2-moe online fp8 vs bf16: max %.3g (max |logit| %.3g)\n", e.max_abs, e.ref_max_abs);
  EXPECT_GT(e.max_abs, 0.0);
  EXPECT_LE(e.max_abs, 0.25 * e.ref_max_abs);  // measured 1.16 of 8.38
  const int64_t V = fp8->vocab_size();
  int same = 0;
  for (int64_t t = 0; t < c.T; ++t)
    same += testing::Argmax(got.data() + t * V, V) == testing::Argmax(want.data() + t * V, V);
  EXPECT_GE(same, c.T * 8 / 10) << same << " of " << c.T;
}

// An Inf (or NaN) in an expert's BF16 weight cannot be quantized: the load names the tensor
// and the element.
TEST(OnlineFp8Moe, NonFiniteExpertWeightIsALoadErrorNamingTheTensor) {
  testing::TempDir tmp;
  const std::string bad = "model.layers.3.mlp.experts.6.up_proj.weight";
  testing::CopyWithBf16Element(kMoe, tmp.path(), bad, 7, 0xFF80);  // BF16 -Inf
  testing::ExpectLoadError([&] { Model::Load(tmp.path(), Online(vt::DType::kF32)); }, {bad, "element 7", "NaN or Inf"});
  EXPECT_NO_THROW(Model::Load(tmp.path(), testing::CpuOptions(vt::DType::kF32)));  // BF16 as it is: loads
}

}  // namespace
}  // namespace vtllm::model
