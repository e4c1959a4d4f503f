// `vtllm quantize` (model/quantize.h) of a mixture-of-experts checkpoint (the qwen3-moe-tiny
// fixture: layers 1 and 3 sparse, 8 experts, 2 per token). The written checkpoint loads in the
// static FP8 path unchanged and gives the logits of a float64 emulation of vLLM's FP8 MoE from
// the BF16 weights and the written scales; every expert's scales are checked against values
// the test computes itself (weights: amax / 448 and each byte from the e4m3 grid; inputs: the
// amax a float64 BF16 forward of the calibration routes to each expert, / 448); an expert no
// calibration token reached gets its layer's largest scale of its kind; experts stored fused
// are written per expert; bad inputs are errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "checkpoint_edit.h"
#include "fp8_reference_forward.h"
#include "loader_test_util.h"
#include "model/quantize.h"
#include "model/safetensors_writer.h"
#include "model_oracle.h"
#include "vt/error.h"

namespace vtllm::model {
namespace {

const std::string kMoe = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen3-moe-tiny";

QuantizeOptions Options(const std::string& format, const std::vector<int>& lengths = {40, 23, 64}) {
  QuantizeOptions o;
  o.format = format;
  o.calibration = testing::CalibrationWindows(ModelConfig::FromDir(kMoe).vocab_size, 4242, lengths);
  o.cpu_threads = 2;
  o.progress = false;
  return o;
}

std::string Expert(int64_t layer, int64_t e, const char* proj) {
  return "model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(e) + "." + proj;
}

// Every projection's written scales by prefix, checking their dtype and shape.
void ReadAllScales(const Checkpoint& ck, const vt::Shape& shape, std::map<std::string, float>& weight_scale,
                   std::map<std::string, float>& input_scale) {
  for (const std::string& n : ck.names()) {
    for (auto [suffix, dst] : {std::pair{std::string(".weight_scale"), &weight_scale},
                               std::pair{std::string(".input_scale"), &input_scale}}) {
      if (n.size() <= suffix.size() || n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      EXPECT_EQ(ck.Info(n).dtype, vt::DType::kF32) << n;
      EXPECT_EQ(ck.Info(n).shape, shape) << n;
      (*dst)[n.substr(0, n.size() - suffix.size())] = ck.GetScalarF32(n);
    }
  }
}

// The block and kind of an expert projection: "model.layers.1.mlp. down" or "... gate_up".
std::string KindOf(const std::string& prefix) {
  return prefix.substr(0, prefix.find("experts.")) + (prefix.find("down_proj") != std::string::npos ? " down" : " gate_up");
}

void CheckQuantizedMoe(const std::string& format) {
  SCOPED_TRACE(format);
  testing::TempDir tmp;
  const std::string out = tmp / "q";
  const QuantizeOptions opts = Options(format);
  const QuantizeReport r = QuantizeCheckpoint(kMoe, out, opts);
  const ModelConfig cfg = ModelConfig::FromDir(kMoe);
  const int64_t E = cfg.num_experts;

  // The layout: experts quantized, routers BF16 and excluded in the format's spelling.
  const bool ct = format == "compressed-tensors";
  const QuantConfig qc = QuantConfig::FromDir(out);
  EXPECT_EQ(qc.method, QuantMethod::kFp8Static);
  EXPECT_TRUE(qc.IsQuantized(Expert(1, 0, "gate_proj")));
  EXPECT_TRUE(qc.IsQuantized(Expert(3, 7, "down_proj")));
  EXPECT_FALSE(qc.IsQuantized("model.layers.1.mlp.gate"));
  EXPECT_FALSE(qc.IsQuantized("lm_head"));
  const std::string router_rule = ct ? "re:.*mlp\\.gate$" : "*.mlp.gate";
  EXPECT_NE(std::find(qc.ignore.begin(), qc.ignore.end(), router_rule), qc.ignore.end()) << router_rule;
  if (!ct) {
    const std::string hf = testing::ReadBytes(out + "/hf_quant_config.json");
    EXPECT_NE(hf.find("\"*.mlp.gate\""), std::string::npos) << hf;
  }
  const Checkpoint qck = Checkpoint::Open(out);
  for (int64_t l : {1, 3}) {
    const std::string router = "model.layers." + std::to_string(l) + ".mlp.gate";
    EXPECT_EQ(qck.Info(router + ".weight").dtype, vt::DType::kBF16);
    EXPECT_FALSE(qck.Has(router + ".weight_scale"));
    EXPECT_FALSE(qck.Has(router + ".input_scale"));
  }
  std::map<std::string, float> ws, is;
  ReadAllScales(qck, ct ? vt::Shape{1} : vt::Shape{}, ws, is);
  EXPECT_EQ(ws.size(), r.weight_scale.size());
  EXPECT_EQ(is.size(), ws.size());

  // Expert weights: scale = amax / 448 in f32 and each byte the nearest e4m3 code of
  // w * (1 / scale), from the BF16 source.
  testing::ReferenceForward bf16(kMoe, testing::RefMode::kBf16);
  int64_t experts_checked = 0;
  for (int64_t l : {1, 3})
    for (int64_t e = 0; e < E; ++e)
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        const std::string p = Expert(l, e, proj);
        ASSERT_EQ(ws.count(p), 1u) << p;
        EXPECT_EQ(qck.Info(p + ".weight").dtype, vt::DType::kF8E4M3) << p;
        const std::vector<double> w = bf16.Weight(p + ".weight");
        double amax = 0;
        for (double v : w) amax = std::max(amax, std::fabs(v));
        EXPECT_EQ(ws[p], static_cast<float>(amax) / 448.0f) << p;
        const vt::Tensor q = qck.Get(p + ".weight");
        const float inv = 1.0f / ws[p];
        int64_t mismatches = 0;
        for (size_t i = 0; i < w.size(); ++i)
          mismatches += q.data_as<uint8_t>()[i] != testing::E4m3Code(static_cast<float>(w[i]) * inv);
        EXPECT_EQ(mismatches, 0) << p;
        ++experts_checked;
      }
  EXPECT_EQ(experts_checked, 2 * E * 3);

  // Input scales: amax / 448 of what an independent float64 forward of the calibration routes
  // to each expert (gate and up: its tokens' rows; down: their Silu(g) * u).
  for (const auto& ids : opts.calibration) bf16.Logits(ids);
  std::set<std::string> reached;
  for (const auto& [p, amax] : bf16.input_amax()) {
    ASSERT_EQ(is.count(p), 1u) << p;
    EXPECT_NEAR(is[p], amax / 448.0, amax / 448.0 * 1e-4) << p;
    reached.insert(p);
  }
  std::set<std::string> uncalibrated(r.uncalibrated_experts.begin(), r.uncalibrated_experts.end());
  for (const auto& [p, s] : is) EXPECT_EQ(reached.count(p) + uncalibrated.count(p), 1u) << p;
  const auto experts_reached =
      std::count_if(reached.begin(), reached.end(), [](const std::string& p) { return p.find("experts.") != std::string::npos; });
  std::printf("%s: %lld of %lld expert projections calibrated\n", format.c_str(),
              static_cast<long long>(experts_reached), static_cast<long long>(2 * E * 3));

  // The static FP8 path loads it unchanged and matches the emulation of those scales (the
  // dense quantize test's bound: 1e-4 but where an activation's code flips, at few positions
  // and by at most 0.1), and stays close to the BF16 model.
  auto model = Model::Load(out, testing::CpuOptions(vt::DType::kF32));
  auto bf16_model = Model::Load(kMoe, testing::CpuOptions(vt::DType::kF32));
  EXPECT_EQ(model->quant().method, QuantMethod::kFp8Static);
  testing::ReferenceForward emu(kMoe, testing::RefMode::kStaticFp8, ws, is);
  const int64_t V = model->vocab_size();
  int flipped = 0, positions = 0, same_top = 0;
  double worst = 0, vs_bf16 = 0, bf16_max = 0;
  for (const testing::OracleCase& c : testing::ReadOracle(kMoe)) {
    const std::vector<float> got = testing::PromptLogits(*model, c.prompt);
    const std::vector<float> want_bf16 = testing::PromptLogits(*bf16_model, c.prompt);
    const std::vector<double> ref = emu.Logits(c.prompt);
    for (int64_t t = 0; t < c.T; ++t) {
      double d = 0;
      for (int64_t v = 0; v < V; ++v) {
        d = std::max(d, std::fabs(got[t * V + v] - ref[t * V + v]));
        vs_bf16 = std::max(vs_bf16, std::fabs(static_cast<double>(got[t * V + v]) - want_bf16[t * V + v]));
        bf16_max = std::max(bf16_max, std::fabs(static_cast<double>(want_bf16[t * V + v])));
      }
      same_top += testing::Argmax(got.data() + t * V, V) == testing::Argmax(want_bf16.data() + t * V, V);
      worst = std::max(worst, d);
      flipped += d > 1e-4;
      ++positions;
    }
  }
  std::printf("%s: static fp8 moe vs emulation max %.3g, %d of %d positions above 1e-4; vs bf16 max %.3g (max |logit| "
              "%.3g), same top-1 at %d\n",
              format.c_str(), worst, flipped, positions, vs_bf16, bf16_max, same_top);
  EXPECT_LE(worst, 0.1);
  EXPECT_LE(flipped, positions / 10);
  EXPECT_LE(vs_bf16, 0.5 * bf16_max);
  EXPECT_GE(same_top, positions * 3 / 4);
}

TEST(QuantizeMoe, ModelOptCheckpointLoadsStaticAndMatchesTheEmulation) { CheckQuantizedMoe("modelopt"); }
TEST(QuantizeMoe, CompressedTensorsCheckpointLoadsStaticAndMatchesTheEmulation) {
  CheckQuantizedMoe("compressed-tensors");
}

// Two calibration tokens reach at most four of a sparse layer's eight experts. Each expert
// projection no token reached is reported, and its input scale is the largest written for
// its layer's reached experts of the same kind (gate/up or down): the scale the static loader
// takes for every expert of the layer anyway. The result loads.
TEST(QuantizeMoe, AnExpertNoTokenReachedTakesItsLayersLargestScale) {
  testing::TempDir tmp;
  const QuantizeOptions opts = Options("modelopt", {2});
  const QuantizeReport r = QuantizeCheckpoint(kMoe, tmp / "q", opts);
  testing::ReferenceForward bf16(kMoe, testing::RefMode::kBf16);
  for (const auto& ids : opts.calibration) bf16.Logits(ids);
  std::set<std::string> want_uncalibrated;
  for (int64_t l : {1, 3})
    for (int64_t e = 0; e < 8; ++e)
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
        if (bf16.input_amax().count(Expert(l, e, proj)) == 0) want_uncalibrated.insert(Expert(l, e, proj));
  ASSERT_GE(want_uncalibrated.size(), 2u * 4 * 3);
  EXPECT_EQ(std::set<std::string>(r.uncalibrated_experts.begin(), r.uncalibrated_experts.end()), want_uncalibrated);
  std::map<std::string, float> largest;  // by layer and kind, over the reached experts
  for (const auto& [p, s] : r.input_scale)
    if (p.find("experts.") != std::string::npos && want_uncalibrated.count(p) == 0)
      largest[KindOf(p)] = std::max(largest[KindOf(p)], s);
  const Checkpoint ck = Checkpoint::Open(tmp / "q");
  for (const std::string& p : want_uncalibrated) {
    EXPECT_EQ(r.input_amax.at(p), 0.0f) << p;
    ASSERT_GT(largest.count(KindOf(p)), 0u) << p;
    EXPECT_EQ(ck.GetScalarF32(p + ".input_scale"), largest[KindOf(p)]) << p;
  }
  auto model = Model::Load(tmp / "q", testing::CpuOptions(vt::DType::kBF16));
  for (float v : testing::PromptLogits(*model, {1, 2, 3})) ASSERT_TRUE(std::isfinite(v));
}

// Qwen2-MoE: the shared expert's projections are calibrated and quantized as linears; its
// sigmoid gate, like the routers, stays BF16 and is listed as excluded. The result loads in
// the static path and stays close to the BF16 model.
TEST(QuantizeMoe, SharedExpertProjectionsAreQuantizedAndItsGateExcluded) {
  const std::string dir = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen2-moe-tiny";
  testing::TempDir tmp;
  QuantizeOptions o = Options("compressed-tensors");
  const QuantizeReport r = QuantizeCheckpoint(dir, tmp / "q", o);
  const std::string p = "model.layers.1.mlp.";
  for (const char* proj : {"shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj",
                           "experts.7.down_proj"})
    EXPECT_EQ(r.input_scale.count(p + proj), 1u) << proj;
  const Checkpoint ck = Checkpoint::Open(tmp / "q");
  EXPECT_EQ(ck.Info(p + "shared_expert.up_proj.weight").dtype, vt::DType::kF8E4M3);
  EXPECT_EQ(ck.Info(p + "shared_expert_gate.weight").dtype, vt::DType::kBF16);
  EXPECT_EQ(ck.Info(p + "gate.weight").dtype, vt::DType::kBF16);
  const QuantConfig qc = QuantConfig::FromDir(tmp / "q");
  for (const char* rule : {"re:.*mlp\\.gate$", "re:.*mlp\\.shared_expert_gate$"})
    EXPECT_NE(std::find(qc.ignore.begin(), qc.ignore.end(), rule), qc.ignore.end()) << rule;
  EXPECT_FALSE(qc.IsQuantized(p + "shared_expert_gate"));
  EXPECT_TRUE(qc.IsQuantized(p + "shared_expert.gate_up_proj"));
  auto fp8 = Model::Load(tmp / "q", testing::CpuOptions(vt::DType::kF32));
  auto bf16 = Model::Load(dir, testing::CpuOptions(vt::DType::kF32));
  EXPECT_EQ(fp8->quant().method, QuantMethod::kFp8Static);
  const testing::OracleCase c = testing::ReadOracle(dir).back();
  const testing::LogitError e =
      testing::CompareLogits(testing::PromptLogits(*fp8, c.prompt), testing::PromptLogits(*bf16, c.prompt));
  std::printf("qwen2-moe static fp8 vs bf16: max %.3g (max |logit| %.3g)\n", e.max_abs, e.ref_max_abs);
  EXPECT_GT(e.max_abs, 0.0);
  EXPECT_LE(e.max_abs, 0.25 * e.ref_max_abs);
}

// Experts stored fused (transformers 5: experts.gate_up_proj [E, 2I, H], experts.down_proj
// [E, H, I]) are written one tensor per expert: the same checkpoint, byte for byte, as from
// the same experts stored per expert.
TEST(QuantizeMoe, FusedExpertsAreWrittenOneTensorPerExpert) {
  testing::TempDir tmp;
  const std::string fused = testing::CopyWithFusedExperts(kMoe, tmp.Sub("fused"));
  QuantizeCheckpoint(kMoe, tmp / "a", Options("modelopt"));
  QuantizeCheckpoint(fused, tmp / "b", Options("modelopt"));
  const Checkpoint a = Checkpoint::Open(tmp / "a"), b = Checkpoint::Open(tmp / "b");
  std::vector<std::string> na = a.names(), nb = b.names();
  std::sort(na.begin(), na.end());
  std::sort(nb.begin(), nb.end());
  ASSERT_EQ(na, nb);
  EXPECT_TRUE(b.Has(Expert(3, 7, "down_proj") + ".weight"));
  EXPECT_FALSE(b.Has("model.layers.1.mlp.experts.gate_up_proj"));
  for (const std::string& n : na) {
    const vt::Tensor ta = a.Get(n), tb = b.Get(n);
    ASSERT_EQ(ta.dtype(), tb.dtype()) << n;
    ASSERT_EQ(ta.shape(), tb.shape()) << n;
    EXPECT_EQ(std::memcmp(ta.data(), tb.data(), ta.nbytes()), 0) << n;
  }
}

using testing::ExpectError;

std::string EditedCopy(const testing::TempDir& tmp, const std::string& name, const testing::TensorEdit& edit) {
  return testing::EditedCopy(kMoe, tmp.Sub(name), edit);
}

TEST(QuantizeMoe, MalformedExpertsAreClearErrorsNamingTheTensor) {
  testing::TempDir tmp;
  using Keep = std::vector<std::vector<char>>;
  // An expert stored in F32.
  const std::string f32_name = Expert(1, 2, "up_proj") + ".weight";
  const std::string f32 = testing::CopyWithF32Tensor(kMoe, tmp.Sub("f32"), f32_name);
  ExpectError([&] { QuantizeCheckpoint(f32, tmp / "o1", Options("modelopt")); }, {f32_name, "F32", "BF16"});

  // An Inf in the last sparse layer's expert down projection (its output reaches no observed
  // linear, so the calibration finishes and the weight's own check speaks).
  const std::string inf_name = Expert(3, 5, "down_proj") + ".weight";
  const std::string inf = testing::CopyWithBf16Element(kMoe, tmp.Sub("inf"), inf_name, 3, 0x7F80);  // +Inf
  ExpectError([&] { QuantizeCheckpoint(inf, tmp / "o2", Options("modelopt")); }, {inf_name, "NaN or Inf"});

  // A missing expert tensor.
  const std::string gone_name = Expert(1, 6, "gate_proj") + ".weight";
  const std::string gone = EditedCopy(tmp, "gone", [&](const std::string& n, const vt::Tensor& t, SafetensorsWriter& w,
                                                       Keep&) {
    if (n != gone_name) w.Add(n, t);
  });
  ExpectError([&] { QuantizeCheckpoint(gone, tmp / "o3", Options("compressed-tensors")); }, {gone_name});

  // A fused expert tensor of the wrong shape (H = 32 instead of 64): refused before anything runs.
  const std::string fused = EditedCopy(tmp, "fused", [&](const std::string& n, const vt::Tensor& t,
                                                         SafetensorsWriter& w, Keep& keep) {
    if (n.find("layers.1.mlp.experts.") == std::string::npos) return w.Add(n, t);
    if (n != Expert(1, 0, "gate_proj") + ".weight") return;
    keep.emplace_back(static_cast<size_t>(8 * 96 * 32 * 2), '\0');
    w.Add("model.layers.1.mlp.experts.gate_up_proj", vt::DType::kBF16, {8, 96, 32}, keep.back().data());
  });
  ExpectError([&] { QuantizeCheckpoint(fused, tmp / "o4", Options("modelopt")); },
              {"model.layers.1.mlp.experts.gate_up_proj", "[8, 96, 32]", "[8, 96, 64]"});
  for (const char* d : {"o1", "o2", "o3", "o4"}) EXPECT_FALSE(std::filesystem::exists(tmp / d)) << d;
}

}  // namespace
}  // namespace vtllm::model
