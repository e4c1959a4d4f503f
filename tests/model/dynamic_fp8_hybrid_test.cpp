// Block FP8 and per-channel FP8 (dynamic activations) of the hybrid Gated DeltaNet fixtures, whose
// linears are row blocks of stored tensors: Qwen3-Next's q, k, v, z of in_proj_qkvz and b, a of
// in_proj_ba (interleaved per key-head group), and the gated attention's q and gate rows of
// q_proj (heads split into rotary runs). The test quantizes qwen3-next-tiny and qwen3_5-tiny in
// each format (every projection but the routed experts', the routers' and lm_head) with block
// sizes smaller than the fixtures' widths, so that shards start inside a scale block, and
// compares the f32 logits and greedy tokens with a float64 emulation of the format read from
// the written checkpoint (hybrid_fp8_reference.h, kBlock / kChannel: each row keeps the scale
// row it is stored with).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "checkpoint_edit.h"
#include "hybrid_fp8_reference.h"
#include "loader_test_util.h"
#include "model/quant_config.h"
#include "model_oracle.h"

namespace vtllm::model {
namespace {

const std::string kFixtures = std::string(VTLLM_FIXTURES_DIR) + "/models/";

// Block [bn, bk], or per-channel when bn is 0.
struct Format {
  int64_t bn = 0, bk = 0;
  bool block() const { return bn > 0; }
};

// The projections quantized: decoder linears. The routed experts stay unquantized here (the
// MoeFp8Dynamic tests cover block and per-channel experts), as do the routers, the shared
// expert's gate and lm_head.
bool Quantized(const std::string& name) {
  return name.find("proj") != std::string::npos && name.size() > 7 &&
         name.compare(name.size() - 7, 7, ".weight") == 0 && name.find(".experts.") == std::string::npos;
}

// A copy of `src` in format f: per block (or row) s = f32(amax / 448) (1 for zeros), codes
// e4m3(f32(w / s)). bad_rows: each scale tensor written with that many rows more (or fewer).
std::string QuantizedCopy(const std::string& src, const testing::TempDir& tmp, const Format& f, int bad_rows = 0) {
  const std::string dir = tmp.Sub("q");
  testing::EditedCopy(src, dir, [&](const std::string& n, const vt::Tensor& t, SafetensorsWriter& w,
                                    std::vector<std::vector<char>>& keep) {
    if (!Quantized(n)) return w.Add(n, t);
    const int64_t N = t.dim(0), K = t.dim(1);
    const int64_t bn = f.block() ? f.bn : 1, bk = f.block() ? f.bk : K;
    const int64_t nb = (N + bn - 1) / bn, kb = (K + bk - 1) / bk;
    keep.emplace_back(static_cast<size_t>(N * K));
    uint8_t* q = reinterpret_cast<uint8_t*>(keep.back().data());
    const int64_t alloc = std::max(nb, nb + bad_rows) * kb;
    keep.emplace_back(static_cast<size_t>(alloc) * sizeof(float), 0);
    float* s = reinterpret_cast<float*>(keep.back().data());
    for (int64_t i = 0; i < alloc; ++i) s[i] = 1.0f;
    for (int64_t bi = 0; bi < nb; ++bi)
      for (int64_t bj = 0; bj < kb; ++bj) {
        float amax = 0.0f;
        for (int64_t r = bi * bn; r < std::min(N, (bi + 1) * bn); ++r)
          for (int64_t k = bj * bk; k < std::min(K, (bj + 1) * bk); ++k)
            amax = std::max(amax, std::fabs(vt::Bf16ToFloat(t.data_as<uint16_t>()[r * K + k])));
        const float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
        s[bi * kb + bj] = sc;
        for (int64_t r = bi * bn; r < std::min(N, (bi + 1) * bn); ++r)
          for (int64_t k = bj * bk; k < std::min(K, (bj + 1) * bk); ++k)
            q[r * K + k] = testing::E4m3Code(vt::Bf16ToFloat(t.data_as<uint16_t>()[r * K + k]) / sc);
      }
    const std::string base = n.substr(0, n.size() - 7);
    w.Add(n, vt::DType::kF8E4M3, t.shape(), q);
    w.Add(base + (f.block() ? ".weight_scale_inv" : ".weight_scale"), vt::DType::kF32, {nb + bad_rows, kb}, s);
  });
  std::ifstream in(src + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["quantization_config"] =
      testing::DynamicFp8QuantConfig(f.bn, f.bk, {"lm_head", "mlp.experts", "shared_expert_gate"},
                                     {"lm_head", "re:.*mlp\\.experts\\..*", "re:.*mlp\\.gate$", "re:.*shared_expert_gate$"});
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  return dir;
}

testing::HybridReference Emulation(const std::string& dir, const Format& f, double perturbation) {
  return testing::HybridReference(dir, f.block() ? testing::HybridMode::kBlock : testing::HybridMode::kChannel,
                                  perturbation, {f.bn, f.bk});
}

// f32 logits against the emulation with the rule of static_fp8_hybrid_test.cpp: every prompt
// position agrees to 1e-4 until the prompt's first e4m3 code flip (an activation on a rounding
// boundary, amplified by these tiny random models and carried on by the GDN state), and at
// least `min_unflipped` of all positions come before a flip (measured 122 to 159 of 189, max
// 3.7e-6 to 7.2e-6). Position 0 agrees, or flips where the emulation with its quantized inputs
// scaled by 1 +- 2^-21 agrees with ours instead (measured once: Qwen3-Next per-channel, the
// 1-token prompt, 0.088 off, 5.3e-6 from the scaled emulation); a wrong scale row moves every
// position 0. The emulation is far from the unquantized model (checked >= 0.3; measured 4 to
// 6.9). Greedy decode steps of the short prompts: GreedyAgainstReference.
void CheckFormat(const std::string& name, const Format& f, double min_unflipped) {
  const std::string label = f.block() ? "block [" + std::to_string(f.bn) + ", " + std::to_string(f.bk) + "]"
                                      : std::string("channel/token");
  SCOPED_TRACE(name + " " + label);
  const std::string src = kFixtures + name;
  testing::TempDir tmp;
  const std::string dir = QuantizedCopy(src, tmp, f);
  auto model = Model::Load(dir, testing::CpuOptions(vt::DType::kF32));
  ASSERT_EQ(model->quant().method, f.block() ? QuantMethod::kFp8Block : QuantMethod::kFp8ChannelToken);
  testing::HybridReference emu = Emulation(dir, f, 0.0);
  testing::HybridReference exact(src, testing::HybridMode::kExact);
  const testing::EmulationComparison c = testing::CompareWithEmulation(*model, emu, exact, src);
  std::printf("[%s %s] fp8 vs float64 emulation: max %.3g over %d positions before a flip, %d from there; "
              "emulation vs unquantized %.3g; %d greedy steps equal\n",
              name.c_str(), label.c_str(), c.worst, c.before, c.after, c.fp8_vs_exact, c.greedy_steps);
  // Position 0 may be off only where activations scaled by 1 +- 2^-21 flip the emulation to
  // ours: an activation on a rounding boundary, not a wrong scale or row.
  const int64_t V = model->vocab_size();
  for (const std::vector<int32_t>& prompt : c.flipped_at_0) {
    const std::vector<float> got = testing::PromptLogits(*model, prompt);
    double best = INFINITY;
    for (double p : {std::ldexp(1.0, -21), -std::ldexp(1.0, -21)}) {
      const std::vector<double> rp = Emulation(dir, f, p).Logits(prompt);
      double m = 0;
      for (int64_t v = 0; v < V; ++v) m = std::max(m, std::fabs(rp[v] - got[v]));
      best = std::min(best, m);
    }
    std::printf("  position 0 of a %zu-token prompt flips; the emulation with inputs * (1 +- 2^-21) is %.3g off\n",
                prompt.size(), best);
    EXPECT_LE(best, 1e-4) << "position 0 of a " << prompt.size() << "-token prompt";
  }
  EXPECT_GE(c.before, min_unflipped * (c.before + c.after));
  EXPECT_GE(c.fp8_vs_exact, 0.3);
  EXPECT_GE(c.greedy_steps, 4);
}

// Qwen3-Next: in_proj_qkvz's per-group rows [q 16 | k 16 | v 64 | z 64] (160 a group), in_proj_ba's
// [b 2 | a 2]; q_proj's heads of 32 dims split into runs of 4 and 12 (rotary 8).
// [32, 32]: q, k of group 0 share scale row 0, group 1's q starts at stored row 160 = 5 blocks,
// in the merged q at row 16: every qkvz linear takes per-row scales.
TEST(DynamicFp8Hybrid, Qwen3NextBlock32) { CheckFormat("qwen3-next-tiny", {32, 32}, 0.5); }
// [16, 24]: qkvz's shards are whole 16-row blocks (the block layout is kept for them); in_proj_ba
// and q_proj are not; K = 64 and 128 end in a partial column group.
TEST(DynamicFp8Hybrid, Qwen3NextBlock16x24) { CheckFormat("qwen3-next-tiny", {16, 24}, 0.5); }
TEST(DynamicFp8Hybrid, Qwen3NextChannel) { CheckFormat("qwen3-next-tiny", {}, 0.5); }
// Qwen3.5: in_proj_qkv's [q 32 | k 32 | v 128] merged with in_proj_z; [24, 24] puts k's first
// row inside scale row 1 of in_proj_qkv.
TEST(DynamicFp8Hybrid, Qwen35Block24) { CheckFormat("qwen3_5-tiny", {24, 24}, 0.5); }
TEST(DynamicFp8Hybrid, Qwen35Channel) { CheckFormat("qwen3_5-tiny", {}, 0.5); }

// A scale tensor of a row-split weight with the wrong number of rows is a load error naming it
// and both shapes (in_proj_qkvz: 320 rows, 64 columns).
TEST(DynamicFp8Hybrid, MalformedScaleOfARowSplitWeightNamesTheTensor) {
  const std::string p = "model.layers.0.linear_attn.in_proj_qkvz.";
  {
    testing::TempDir tmp;
    const std::string dir = QuantizedCopy(kFixtures + "qwen3-next-tiny", tmp, {32, 32}, 1);
    testing::ExpectLoadError([&] { Model::Load(dir, testing::CpuOptions(vt::DType::kF32)); },
                             {p + "weight_scale_inv", "[11, 2]", "expected [10, 2]"});
  }
  {
    testing::TempDir tmp;
    const std::string dir = QuantizedCopy(kFixtures + "qwen3-next-tiny", tmp, {}, -1);
    testing::ExpectLoadError([&] { Model::Load(dir, testing::CpuOptions(vt::DType::kF32)); },
                             {p + "weight_scale", "[319, 1]", "expected [320, 1]"});
  }
}

}  // namespace
}  // namespace vtllm::model
