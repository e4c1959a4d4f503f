// Online FP8 (`--quantization fp8`) of the hybrid Gated DeltaNet fixtures (qwen3-next-tiny,
// qwen3_5-tiny, qwen3_5-moe-tiny) against a float64 emulation of the format built in the test
// (hybrid_fp8_reference.h): the row-block shards of Qwen3-Next's in_proj_qkvz / in_proj_ba and
// of the gated attention's q_proj take their stored tensor's scale.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "checkpoint_edit.h"
#include "hybrid_fp8_reference.h"
#include "loader_test_util.h"
#include "model/safetensors_writer.h"
#include "model_oracle.h"
#include "vt/error.h"
#include "vt/registry.h"

namespace vtllm::model {
namespace {

const std::string kFixtures = std::string(VTLLM_FIXTURES_DIR) + "/models/";

LoadOptions Online() {
  LoadOptions o = testing::CpuOptions(vt::DType::kF32);
  o.quantization = "fp8";
  return o;
}

// Per prompt position, max |ours - emulation|, split at the prompt's first position that
// differs by more than 1e-4 (a flip: see below); and how far the emulation is from the
// unquantized float64 forward (so that a wrong scale or rounding cannot hide in the bound).
struct Comparison {
  std::vector<double> before_flip, after_flip;
  double fp8_vs_exact = 0;
  int prompts = 0, prompts_flipped = 0, flipped_at_0 = 0;
};

Comparison Compare(const std::string& dir) {
  auto model = Model::Load(dir, Online());
  EXPECT_EQ(model->quant().method, QuantMethod::kFp8Online);
  testing::HybridReference emu(dir, testing::HybridMode::kOnline), exact(dir, testing::HybridMode::kExact);
  const int64_t V = model->vocab_size();
  Comparison c;
  for (const testing::OracleCase& oc : testing::ReadOracle(dir)) {
    const std::vector<float> got = testing::PromptLogits(*model, oc.prompt);
    const std::vector<double> ref = emu.Logits(oc.prompt), ex = exact.Logits(oc.prompt);
    bool flipped = false;
    for (int64_t t = 0; t < oc.T; ++t) {
      const double d = testing::RowDiff(got, ref, ex, t, V, c.fp8_vs_exact);
      flipped = flipped || !(d <= 1e-4);
      c.flipped_at_0 += t == 0 && flipped;
      (flipped ? c.after_flip : c.before_flip).push_back(d);
    }
    ++c.prompts;
    c.prompts_flipped += flipped;
  }
  return c;
}

// With float32 activations only summation orders differ from the float64 emulation, so logits
// agree to 1e-4 (measured: 3.3e-5 Qwen3-Next, 8e-6 Qwen3.5, 3.9e-6 Qwen3.5-MoE) until an
// activation that sits on an e4m3 rounding boundary flips code (or an MoE router near-tie
// flips an expert). These tiny random models amplify a flip (scaling every quantized input of
// the emulation by 1 + 2^-21 moves its logits by up to 4.5), and the Gated DeltaNet state
// carries it to every later position of the prompt, so positions from a prompt's first flip on
// are only checked finite. Which positions flip depends on the exact codes (any change of a
// scale moves them), so the bound is generic: at least half of all positions come before a
// flip (measured: Next 120 of 189, Qwen3.5 182, Qwen3.5-MoE 164), and position 0 of every
// prompt agrees (a flip needs a boundary case; a wrong scale, row or rounding moves every
// position). The emulation is far from the unquantized model (checked >= 0.3, 3000x the
// 1e-4; measured 6.6-7.4), so a wrong weight scale (a shard's own amax instead of its stored
// tensor's) or rows read from the wrong place show.
void CheckAgainstEmulation(const std::string& name, double min_unflipped_fraction) {
  const Comparison c = Compare(kFixtures + name);
  double worst = 0, worst_after = 0;
  for (double d : c.before_flip) worst = std::max(worst, d);
  for (double d : c.after_flip) worst_after = std::max(worst_after, d);
  const int n = static_cast<int>(c.before_flip.size()), n_after = static_cast<int>(c.after_flip.size());
  std::printf("[%s] online fp8 vs float64 emulation: max %.3g over %d positions before a flip; %d prompts of %d "
              "flip, %d positions from there (max %.3g); emulation vs unquantized: %.3g\n",
              name.c_str(), worst, n, c.prompts_flipped, c.prompts, n_after, worst_after, c.fp8_vs_exact);
  ASSERT_GT(n, 0);
  EXPECT_EQ(c.flipped_at_0, 0) << name;
  EXPECT_GE(n, min_unflipped_fraction * (n + n_after)) << name;
  EXPECT_TRUE(std::isfinite(worst_after)) << name;
  EXPECT_GE(c.fp8_vs_exact, 0.3) << name;
}

// The emulation's model math is HF's: unquantized, it reproduces the fixtures' HF float32
// logits (reference.json) at every position.
TEST(OnlineFp8Hybrid, TheReferenceUnquantizedIsHf) {
  for (const char* name : {"qwen3-next-tiny", "qwen3_5-tiny", "qwen3_5-moe-tiny"}) {
    testing::HybridReference exact(kFixtures + name, testing::HybridMode::kExact);
    double worst = 0;
    for (const testing::OracleCase& oc : testing::ReadOracle(kFixtures + name)) {
      const std::vector<double> ex = exact.Logits(oc.prompt);
      for (size_t i = 0; i < ex.size(); ++i) worst = std::max(worst, std::fabs(ex[i] - oc.logits[i]));
    }
    std::printf("[%s] float64 reference vs HF float32: max %.3g\n", name, worst);
    EXPECT_LE(worst, 1e-4) << name;
  }
}

TEST(OnlineFp8Hybrid, Qwen3NextMatchesTheFloat64Emulation) { CheckAgainstEmulation("qwen3-next-tiny", 0.5); }
TEST(OnlineFp8Hybrid, Qwen35MatchesTheFloat64Emulation) { CheckAgainstEmulation("qwen3_5-tiny", 0.5); }
TEST(OnlineFp8Hybrid, Qwen35MoeMatchesTheFloat64Emulation) { CheckAgainstEmulation("qwen3_5-moe-tiny", 0.5); }

// Greedy decoding (prefill, then the recurrent decode steps): each step's logits agree with
// the emulation's to 1e-4 and its token is the emulation's, up to the emulation's first near-tie
// (top-2 margin under 0.05) or the first code flip (as in the prompt check above; a prompt whose
// prefill flipped stops at once); at least 5 steps over the five prompts (measured: Next 9,
// Qwen3.5 30, Qwen3.5-MoE 17).
void CheckGreedy(const std::string& name) {
  const std::string dir = kFixtures + name;
  auto model = Model::Load(dir, Online());
  testing::HybridReference emu(dir, testing::HybridMode::kOnline);
  int compared = 0, flips = 0;
  for (const testing::OracleCase& oc : testing::ReadOracle(dir)) {
    bool flipped = false;
    compared += testing::GreedyAgainstReference(*model, emu, oc.prompt, 8, 1e-4, 0.05, &flipped);
    flips += flipped;
  }
  std::printf("[%s] greedy: %d decode steps equal to the emulation's (logits and token), %d prompts stopped at a "
              "flip\n",
              name.c_str(), compared, flips);
  EXPECT_GE(compared, 5) << name;
}

TEST(OnlineFp8Hybrid, Qwen3NextGreedyIsTheEmulations) { CheckGreedy("qwen3-next-tiny"); }
TEST(OnlineFp8Hybrid, Qwen35GreedyIsTheEmulations) { CheckGreedy("qwen3_5-tiny"); }
TEST(OnlineFp8Hybrid, Qwen35MoeGreedyIsTheEmulations) { CheckGreedy("qwen3_5-moe-tiny"); }

// Every GDN, attention and MLP projection of the dense Qwen3.5 turns into FP8 (1 byte a weight
// and one f32 scale per row), the gated attention's row blocks of q_proj included.
TEST(OnlineFp8Hybrid, ProjectionsAreFp8) {
  for (const char* name : {"qwen3_5-tiny"}) {
    auto bf16 = Model::Load(kFixtures + name, testing::CpuOptions(vt::DType::kF32));
    auto fp8 = Model::Load(kFixtures + name, Online());
    // The stored linears' BF16 bytes minus their FP8 bytes and scales, over every layer.
    const Checkpoint ck = Checkpoint::Open(kFixtures + name);
    int64_t saved = 0;
    for (const std::string& n : ck.names()) {
      if (n.find(".layers.") == std::string::npos || n.size() < 7 || n.substr(n.size() - 7) != ".weight") continue;
      const bool linear = n.find("_proj") != std::string::npos || n.find("in_proj") != std::string::npos;
      if (!linear || n.find("mlp.gate.") != std::string::npos || n.find("shared_expert_gate") != std::string::npos)
        continue;
      const TensorInfo& info = ck.Info(n);
      int64_t numel = 1;
      for (int64_t d : info.shape) numel *= d;
      saved += 2 * numel - numel - 4 * info.shape[0];
    }
    EXPECT_EQ(bf16->weight_bytes() - fp8->weight_bytes(), saved) << name;
  }
}

// A NaN in a row block of Qwen3-Next's fused in_proj_qkvz is a LoadError naming the file, the
// tensor and the element of the stored tensor.
TEST(OnlineFp8Hybrid, NonFiniteFusedWeightIsALoadErrorNamingTheTensor) {
  testing::TempDir tmp;
  const std::string bad = "model.layers.2.linear_attn.in_proj_qkvz.weight";
  const int64_t element = 300 * 64 + 7;  // row 300: the z rows of the second key-head group
  testing::CopyWithBf16Element(kFixtures + "qwen3-next-tiny", tmp.path(), bad, element, 0x7F80);  // BF16 +Inf
  testing::ExpectLoadError([&] { Model::Load(tmp.path(), Online()); },
                           {"model.safetensors", bad, "element " + std::to_string(element), "NaN or Inf"});
}

}  // namespace
}  // namespace vtllm::model
