// `vtllm quantize` (model/quantize.h) on a tiny BF16 Qwen3: the written checkpoint loads in
// the static FP8 path unchanged and gives the logits of a float64 reference built from the
// BF16 weights and the written scales; every scale is checked against an independent
// computation (weights: amax / 448 and the e4m3 byte of each weight, from the format;
// inputs: the amax a float64 BF16 forward of the calibration sees); bad inputs are errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "checkpoint_edit.h"
#include "fp8_reference_forward.h"
#include "loader_test_util.h"
#include "model/quantize.h"
#include "model/safetensors_writer.h"
#include "model_oracle.h"
#include "vt/error.h"

namespace vtllm::model {
namespace {

const std::string kTiny = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen3-mqa-tiny";

QuantizeOptions Options(const std::string& format) {
  QuantizeOptions o;
  o.format = format;
  o.calibration = testing::CalibrationWindows(ModelConfig::FromDir(kTiny).vocab_size, 12345, {40, 23, 64});
  o.cpu_threads = 2;
  o.progress = false;
  return o;
}

struct Written {
  std::map<std::string, float> weight_scale, input_scale;
};

// The scales as written: F32 scalars [] (ModelOpt) or [1] (compressed-tensors).
Written ReadScales(const std::string& dir, const std::map<std::string, float>& prefixes, const vt::Shape& shape) {
  const Checkpoint ck = Checkpoint::Open(dir);
  Written w;
  for (const auto& [p, amax] : prefixes) {
    for (auto [suffix, dst] : {std::pair{".weight_scale", &w.weight_scale}, std::pair{".input_scale", &w.input_scale}}) {
      const TensorInfo& info = ck.Info(p + suffix);
      EXPECT_EQ(info.dtype, vt::DType::kF32) << p << suffix;
      EXPECT_EQ(info.shape, shape) << p << suffix;
      (*dst)[p] = ck.GetScalarF32(p + suffix);
    }
    EXPECT_EQ(ck.Info(p + ".weight").dtype, vt::DType::kF8E4M3) << p;
  }
  return w;
}

void CheckQuantized(const std::string& format) {
  SCOPED_TRACE(format);
  testing::TempDir tmp;
  const std::string out = tmp / "q";
  const QuantizeReport r = QuantizeCheckpoint(kTiny, out, Options(format));
  const ModelConfig cfg = ModelConfig::FromDir(kTiny);
  ASSERT_EQ(r.input_amax.size(), static_cast<size_t>(7 * cfg.num_hidden_layers));  // q k v o gate up down
  EXPECT_EQ(r.calibration_tokens, 40 + 23 + 64);

  // The layout: what the static loader reads, and the files copied.
  const QuantConfig qc = QuantConfig::FromDir(out);
  EXPECT_EQ(qc.method, QuantMethod::kFp8Static);
  EXPECT_EQ(qc.format, format);
  EXPECT_FALSE(qc.IsQuantized("lm_head"));
  EXPECT_TRUE(qc.IsQuantized("model.layers.0.self_attn.qkv_proj"));
  EXPECT_EQ(std::filesystem::exists(out + "/hf_quant_config.json"), format == "modelopt");
  EXPECT_TRUE(std::filesystem::exists(out + "/generation_config.json"));
  const Written w = ReadScales(out, r.input_amax, format == "modelopt" ? vt::Shape{} : vt::Shape{1});
  const Checkpoint qck = Checkpoint::Open(out);
  EXPECT_EQ(qck.Info("lm_head.weight").dtype, vt::DType::kBF16);
  EXPECT_EQ(qck.Info("model.embed_tokens.weight").dtype, vt::DType::kBF16);

  // Weights: scale = amax / 448 in f32 and each byte the nearest e4m3 code of w * (1 / scale).
  testing::ReferenceForward bf16(kTiny, testing::RefMode::kBf16);
  for (const auto& [p, ws] : w.weight_scale) {
    const std::vector<double> wt = bf16.Weight(p + ".weight");
    double amax = 0;
    for (double v : wt) amax = std::max(amax, std::fabs(v));
    EXPECT_EQ(ws, static_cast<float>(amax) / 448.0f) << p;
    const vt::Tensor q = qck.Get(p + ".weight");
    const uint8_t* bytes = static_cast<const uint8_t*>(q.data());
    const float inv = 1.0f / ws;
    int64_t mismatches = 0;
    for (size_t i = 0; i < wt.size(); ++i) mismatches += bytes[i] != testing::E4m3Code(static_cast<float>(wt[i]) * inv);
    EXPECT_EQ(mismatches, 0) << p;
  }
  // Inputs: amax / 448 of what an independent float64 forward of the calibration sees.
  for (const auto& ids : Options(format).calibration) bf16.Logits(ids);
  for (const auto& [p, is] : w.input_scale) {
    const double want = bf16.input_amax().at(p) / 448.0;
    EXPECT_NEAR(is, want, want * 1e-4) << p;
    EXPECT_EQ(is, r.input_amax.at(p) / 448.0f) << p;
  }

  // The static FP8 path loads it unchanged and matches the emulation of those scales: 1e-4
  // but where an activation's fp8 code flips (few positions, none by more than 0.1).
  auto model = Model::Load(out, testing::CpuOptions(vt::DType::kF32));
  EXPECT_EQ(model->quant().method, QuantMethod::kFp8Static);
  testing::ReferenceForward emu(kTiny, testing::RefMode::kStaticFp8, w.weight_scale, w.input_scale);
  const int64_t V = model->vocab_size();
  int flipped = 0, positions = 0;
  double worst = 0;
  for (const testing::OracleCase& c : testing::ReadOracle(kTiny)) {
    const std::vector<float> got = testing::PromptLogits(*model, c.prompt);
    const std::vector<double> ref = emu.Logits(c.prompt);
    for (int64_t t = 0; t < c.T; ++t) {
      double d = 0;
      for (int64_t v = 0; v < V; ++v) d = std::max(d, std::fabs(got[t * V + v] - ref[t * V + v]));
      worst = std::max(worst, d);
      flipped += d > 1e-4;
      ++positions;
    }
  }
  std::printf("%s: static fp8 vs emulation max %.3g, %d of %d positions above 1e-4\n", format.c_str(), worst, flipped,
              positions);
  EXPECT_LE(worst, 0.1);
  EXPECT_LE(flipped, positions / 10);
}

TEST(Quantize, KvCacheScalesAreKeyAndValueAmaxOver448) {
  // With kv_cache_fp8: k_scale = amax(keys after norm and RoPE) / 448, v_scale likewise, as
  // an independent float64 forward of the calibration sees them (to 1e-4: vtllm computes in
  // f32), in each layout's spelling; the checkpoint asks for an FP8 cache in its config and
  // loads with --kv-cache-dtype fp8 (which then reads these scales).
  for (const std::string format : {"modelopt", "compressed-tensors"}) {
    SCOPED_TRACE(format);
    testing::TempDir tmp;
    QuantizeOptions o = Options(format);
    o.kv_cache_fp8 = true;
    const QuantizeReport r = QuantizeCheckpoint(kTiny, tmp / "q", o);
    const ModelConfig cfg = ModelConfig::FromDir(kTiny);
    ASSERT_EQ(r.kv_amax.size(), static_cast<size_t>(cfg.num_hidden_layers));
    testing::ReferenceForward ref(kTiny, testing::RefMode::kBf16);
    for (const auto& ids : o.calibration) ref.Logits(ids);
    const Checkpoint ck = Checkpoint::Open(tmp / "q");
    const bool ct = format == "compressed-tensors";
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
      const std::string a = "model.layers." + std::to_string(l) + ".self_attn.";
      const auto [kmax, vmax] = ref.kv_amax().at(a);
      const std::string kn = a + (ct ? "k_scale" : "k_proj.k_scale"), vn = a + (ct ? "v_scale" : "v_proj.v_scale");
      EXPECT_EQ(ck.Info(kn).shape, ct ? vt::Shape{1} : vt::Shape{});
      EXPECT_NEAR(ck.GetScalarF32(kn), kmax / 448.0, kmax / 448.0 * 1e-4) << kn;
      EXPECT_NEAR(ck.GetScalarF32(vn), vmax / 448.0, vmax / 448.0 * 1e-4) << vn;
    }
    const std::string config = testing::ReadBytes(tmp / "q/config.json");
    EXPECT_NE(config.find(ct ? "\"kv_cache_scheme\": {" : "\"kv_cache_quant_algo\": \"FP8\""), std::string::npos)
        << config;
    LoadOptions lo = testing::CpuOptions(vt::DType::kBF16);
    lo.kv_cache_dtype = "fp8";
    auto model = Model::Load(tmp / "q", lo);
    EXPECT_EQ(model->kv_cache_dtype(), vt::DType::kF8E4M3);
    EXPECT_EQ(testing::PromptLogits(*model, o.calibration[0]).size(),
              o.calibration[0].size() * static_cast<size_t>(model->vocab_size()));
  }
}

TEST(Quantize, ModelOptCheckpointLoadsStaticAndMatchesTheReference) { CheckQuantized("modelopt"); }
TEST(Quantize, CompressedTensorsCheckpointLoadsStaticAndMatchesTheReference) {
  CheckQuantized("compressed-tensors");
}

using testing::ExpectError;

TEST(Quantize, BadInputsAreClearErrors) {
  const std::string fx = std::string(VTLLM_FIXTURES_DIR) + "/models/";
  testing::TempDir tmp;
  ExpectError([&] { QuantizeCheckpoint(fx + "qwen3-fp8-block-tiny", tmp / "a", Options("modelopt")); },
              {"already quantized", "BF16"});
  ExpectError([&] { QuantizeCheckpoint(kTiny, tmp / "c", Options("int8")); }, {"--format", "int8"});
  QuantizeOptions none = Options("modelopt");
  none.calibration.clear();
  ExpectError([&] { QuantizeCheckpoint(kTiny, tmp / "d", none); }, {"no calibration tokens"});
  testing::WriteText(tmp.Sub("full") + "/x.txt", "x");
  ExpectError([&] { QuantizeCheckpoint(kTiny, tmp / "full", Options("modelopt")); }, {"--out", "not empty"});
  for (const char* d : {"a", "c", "d"}) EXPECT_FALSE(std::filesystem::exists(tmp / d)) << d;

  // A linear stored in F32: named, with its dtype.
  const std::string f32 = tmp.Sub("f32");
  const std::string bad = "model.layers.2.self_attn.o_proj.weight";
  testing::CopyWithF32Tensor(kTiny, f32, bad);
  ExpectError([&] { QuantizeCheckpoint(f32, tmp / "e", Options("modelopt")); }, {bad, "F32", "BF16"});
}

}  // namespace
}  // namespace vtllm::model
