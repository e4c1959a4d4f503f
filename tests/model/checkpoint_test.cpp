// Checkpoint: single-file, sharded (index) and multi-file directories; typed access to
// weights and scales; the transformers fixtures; the random checkpoint generator's output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "loader_test_util.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model.h"
#include "model/quant_config.h"
#include "model/safetensors_writer.h"
#include "model_oracle.h"

namespace vtllm::model {
namespace {

using nlohmann::json;
using testing::BytesOf;
using testing::ExpectLoadError;
using testing::TempDir;
using testing::WriteRawSafetensors;

TEST(Checkpoint, SingleFile) {
  TempDir tmp;
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  const float s0 = 0.125f, s1 = 0.5f;
  const uint16_t s2 = 0x3E80;  // bf16 0.25
  SafetensorsWriter writer;
  writer.Add("layer.weight", vt::DType::kF32, {2, 3}, w.data());
  writer.Add("layer.scale0", vt::DType::kF32, {}, &s0);
  writer.Add("layer.scale1", vt::DType::kF32, {1}, &s1);
  writer.Add("layer.scale2", vt::DType::kBF16, {}, &s2);
  writer.Write(tmp / "model.safetensors");

  const Checkpoint c = Checkpoint::Open(tmp.path());
  EXPECT_EQ(c.dir(), tmp.path());
  EXPECT_TRUE(c.Has("layer.weight"));
  EXPECT_FALSE(c.Has("layer.bias"));
  EXPECT_EQ(c.names().size(), 4u);
  EXPECT_EQ(c.total_bytes(), 24u + 4 + 4 + 2);
  EXPECT_EQ(c.FileOf("layer.weight"), tmp / "model.safetensors");
  EXPECT_EQ(c.Info("layer.weight").shape, (vt::Shape{2, 3}));
  const vt::Tensor t = c.GetAs("layer.weight", vt::DType::kF32, {2, 3});
  EXPECT_EQ(t.data_as<float>()[5], 6.0f);
  EXPECT_EQ(c.GetScalarF32("layer.scale0"), 0.125f);
  EXPECT_EQ(c.GetScalarF32("layer.scale1"), 0.5f);
  EXPECT_EQ(c.GetScalarF32("layer.scale2"), 0.25f);
  EXPECT_EQ(c.GetScaleF32("layer.scale1"), 0.5f);
  ExpectLoadError([&] { c.GetScalarF32("layer.weight"); }, {"model.safetensors", "layer.weight", "[2, 3]", "scalar"});
  ExpectLoadError([&] { c.Info("layer.bias"); }, {tmp.path(), "layer.bias", "not found"});
  ExpectLoadError([&] { c.GetAs("layer.weight", vt::DType::kF32, {3, 2}); },
                  {"model.safetensors", "layer.weight", "[2, 3] F32", "expected [3, 2] F32"});
}

TEST(Checkpoint, ShardedThroughTheIndex) {
  TempDir tmp;
  const std::vector<uint16_t> a = {1, 2, 3}, b = {4, 5};
  const std::vector<uint8_t> extra = {9};
  WriteRawSafetensors(tmp / "model-00001-of-00002.safetensors",
                      R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]}})", BytesOf(a));
  WriteRawSafetensors(tmp / "model-00002-of-00002.safetensors",
                      R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                      R"("extra":{"dtype":"U8","shape":[1],"data_offsets":[4,5]}})",
                      BytesOf(b) + BytesOf(extra));
  // A stray file the index does not name must not be read.
  testing::WriteBytes(tmp / "junk.safetensors", "garbage");
  testing::WriteJson(tmp / "model.safetensors.index.json",
                     {{"metadata", {{"total_size", 10}}},
                      {"weight_map", {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}});
  const Checkpoint c = Checkpoint::Open(tmp.path());
  EXPECT_EQ(c.files().size(), 2u);
  EXPECT_EQ(c.FileOf("a"), tmp / "model-00001-of-00002.safetensors");
  EXPECT_EQ(c.FileOf("b"), tmp / "model-00002-of-00002.safetensors");
  EXPECT_EQ(c.Get("b").data_as<uint16_t>()[1], 5);
  EXPECT_TRUE(c.Has("extra")) << "tensors a shard holds beyond the index stay loadable";
}

TEST(Checkpoint, WriterShardsAndIndexRoundTrip) {
  TempDir tmp;
  std::map<std::string, std::string> weight_map;
  uint64_t total = 0;
  for (int shard = 0; shard < 3; ++shard) {
    SafetensorsWriter w;
    const std::string file = "model-0000" + std::to_string(shard + 1) + "-of-00003.safetensors";
    for (int i = 0; i < 4; ++i) {
      const std::string name = "model.layers." + std::to_string(shard * 4 + i) + ".w";
      std::vector<float> v(8, static_cast<float>(shard * 4 + i));
      w.Add(name, vt::DType::kF32, {2, 4}, v.data());
      weight_map[name] = file;
    }
    total += w.data_bytes();
    w.Write(tmp / file);
  }
  WriteSafetensorsIndex(tmp / "model.safetensors.index.json", weight_map, total);
  const Checkpoint c = Checkpoint::Open(tmp.path());
  EXPECT_EQ(c.names().size(), 12u);
  EXPECT_EQ(c.total_bytes(), total);
  for (const auto& [name, file] : weight_map) {
    EXPECT_EQ(c.FileOf(name), tmp / file);
    const int idx = std::stoi(name.substr(13));
    EXPECT_EQ(c.GetAs(name, vt::DType::kF32, {2, 4}).data_as<float>()[7], static_cast<float>(idx));
  }
}

TEST(Checkpoint, SeveralFilesWithoutAnIndex) {
  TempDir tmp;
  const std::vector<float> x = {1}, y = {2};
  WriteRawSafetensors(tmp / "a.safetensors", R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", BytesOf(x));
  WriteRawSafetensors(tmp / "b.safetensors", R"({"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", BytesOf(y));
  const Checkpoint c = Checkpoint::Open(tmp.path());
  EXPECT_EQ(c.GetScalarF32("y"), 2.0f);
  WriteRawSafetensors(tmp / "c.safetensors", R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", BytesOf(y));
  ExpectLoadError([&] { Checkpoint::Open(tmp.path()); }, {"'x'", "a.safetensors", "c.safetensors"});
}

TEST(Checkpoint, EmptyDirectory) {
  TempDir tmp;
  ExpectLoadError([&] { Checkpoint::Open(tmp.path()); }, {tmp.path(), "model.safetensors"});
  ExpectLoadError([&] { Checkpoint::Open(tmp / "nope"); }, {"nope"});
}

TEST(Checkpoint, ValidateScale) {
  EXPECT_EQ(ValidateScale(0.02f, "s"), 0.02f);
  EXPECT_EQ(ValidateScale(1e-30f, "s"), 1e-30f);
  for (float bad : {0.0f, -0.0f, -1.0f, NAN, INFINITY, -INFINITY})
    ExpectLoadError([&] { ValidateScale(bad, "file.safetensors: tensor 'x.input_scale'"); },
                    {"file.safetensors", "x.input_scale", "finite and > 0"});
}

// The ModelOpt fixture, read through the loader: FP8 weights [N, K] with positive scalar
// scales. Projections that read one input (q/k/v, gate/up) share one weight scale,
// amax over the group / 448, so in each group some weight reaches +-448; o_proj and
// down_proj have scales of their own and each reaches it.
TEST(Checkpoint, ModelOptFixture) {
  const std::string dir = testing::FixtureDir("fp8_modelopt");
  const Checkpoint c = Checkpoint::Open(dir);
  const ModelConfig cfg = ModelConfig::FromDir(dir);
  const QuantConfig q = QuantConfig::FromDir(dir);
  ASSERT_EQ(q.method, QuantMethod::kFp8Static);
  const int64_t qd = cfg.num_attention_heads * cfg.head_dim, kvd = cfg.num_key_value_heads * cfg.head_dim;
  using Group = std::vector<std::pair<std::string, vt::Shape>>;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const Group groups[] = {{{"self_attn.q_proj", {qd, cfg.hidden_size}},
                             {"self_attn.k_proj", {kvd, cfg.hidden_size}},
                             {"self_attn.v_proj", {kvd, cfg.hidden_size}}},
                            {{"self_attn.o_proj", {cfg.hidden_size, qd}}},
                            {{"mlp.gate_proj", {cfg.intermediate_size, cfg.hidden_size}},
                             {"mlp.up_proj", {cfg.intermediate_size, cfg.hidden_size}}},
                            {{"mlp.down_proj", {cfg.hidden_size, cfg.intermediate_size}}}};
    for (const Group& g : groups) {
      SCOPED_TRACE(p + g.front().first);
      bool reaches_max = false;
      const float scale = c.GetScaleF32(p + g.front().first + ".weight_scale");
      EXPECT_GT(scale, 0.0f);
      for (const auto& [name, shape] : g) {
        ASSERT_TRUE(q.IsQuantized(p + name));
        const vt::Tensor w = c.GetAs(p + name + ".weight", vt::DType::kF8E4M3, shape);
        EXPECT_EQ(c.GetScaleF32(p + name + ".weight_scale"), scale) << name << " does not share the group's scale";
        EXPECT_GT(c.GetScaleF32(p + name + ".input_scale"), 0.0f);
        const auto* bytes = w.data_as<uint8_t>();
        for (int64_t i = 0; i < w.numel(); ++i) reaches_max |= std::fabs(vt::Fp8E4M3ToFloat(bytes[i])) == 448.0f;
      }
      EXPECT_TRUE(reaches_max);
    }
  }
  EXPECT_FALSE(q.IsQuantized("lm_head"));
  c.GetAs("lm_head.weight", vt::DType::kBF16, {cfg.vocab_size, cfg.hidden_size});
}

// make_random_checkpoint (built with model_tests): every format loads, with HF Qwen3 names and shapes.
TEST(Checkpoint, RandomCheckpointGenerator) {
  const std::string tool = std::string(VTLLM_BINARY_DIR) + "/tools/make_random_checkpoint";
  ASSERT_TRUE(std::filesystem::exists(tool)) << tool << " is missing: build the make_random_checkpoint target";
  for (const std::string format : {"bf16", "fp8-modelopt", "fp8-compressed-tensors"}) {
    SCOPED_TRACE(format);
    TempDir tmp;
    const std::string cmd = tool + " --out " + tmp.path() + " --preset qwen3-tiny --layers 2 --seed 3 --threads 2" +
                            " --format " + format + " 2>/dev/null";
    ASSERT_EQ(std::system((VTLLM_TOOL_RUNNER + cmd).c_str()), 0) << cmd;
    const ModelConfig cfg = ModelConfig::FromDir(tmp.path());
    EXPECT_EQ(cfg.architecture, "Qwen3ForCausalLM");
    EXPECT_EQ(cfg.num_hidden_layers, 2);
    EXPECT_EQ(cfg.hidden_size, 128);
    const QuantConfig q = QuantConfig::FromDir(tmp.path());
    const bool fp8 = format != "bf16";
    EXPECT_EQ(q.method, fp8 ? QuantMethod::kFp8Static : QuantMethod::kNone);
    if (fp8) {
      EXPECT_EQ(q.format, format.substr(4));
    }
    const Checkpoint c = Checkpoint::Open(tmp.path());
    EXPECT_EQ(c.names().size(), 3u + 2 * (fp8 ? 25 : 11));
    const vt::Shape scalar = format == "fp8-compressed-tensors" ? vt::Shape{1} : vt::Shape{};
    for (int l = 0; l < 2; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      const vt::Tensor norm = c.GetAs(p + "input_layernorm.weight", vt::DType::kBF16, {128});
      EXPECT_NEAR(vt::Bf16ToFloat(norm.data_as<uint16_t>()[0]), 1.0f, 0.2f);
      c.GetAs(p + "self_attn.q_norm.weight", vt::DType::kBF16, {32});
      const std::string down = p + "mlp.down_proj";
      EXPECT_TRUE(q.IsQuantized(down) == fp8);
      if (!fp8) {
        c.GetAs(down + ".weight", vt::DType::kBF16, {128, 384});
        continue;
      }
      const vt::Tensor w = c.GetAs(down + ".weight", vt::DType::kF8E4M3, {128, 384});
      EXPECT_EQ(c.Info(down + ".weight_scale").shape, scalar);
      EXPECT_EQ(c.Info(down + ".input_scale").shape, scalar);
      // weight_scale = amax / 448 with N(0, 0.02) weights: the decoded weights' spread.
      const float ws = c.GetScaleF32(down + ".weight_scale");
      c.GetScaleF32(down + ".input_scale");
      double sum2 = 0, amax = 0;
      for (int64_t i = 0; i < w.numel(); ++i) {
        const double v = vt::Fp8E4M3ToFloat(w.data_as<uint8_t>()[i]) * ws;
        sum2 += v * v;
        amax = std::max(amax, std::fabs(v));
      }
      EXPECT_FLOAT_EQ(amax, 448.0 * ws);
      EXPECT_NEAR(std::sqrt(sum2 / w.numel()), 0.02, 0.002);
    }
  }
}

// --format fp8-block: the official Qwen3-*-FP8 layout (quant_method fp8, dynamic
// activations, 128 x 128 weight blocks each with its weight_scale_inv = the block's amax /
// 448; lm_head not converted).
TEST(Checkpoint, RandomCheckpointGeneratorBlockFp8) {
  const std::string tool = std::string(VTLLM_BINARY_DIR) + "/tools/make_random_checkpoint";
  TempDir tmp;
  const std::string cmd = tool + " --out " + tmp.path() +
                          " --preset qwen3-tiny --layers 2 --seed 5 --threads 2 --format fp8-block 2>/dev/null";
  ASSERT_EQ(std::system((VTLLM_TOOL_RUNNER + cmd).c_str()), 0) << cmd;
  const QuantConfig q = QuantConfig::FromDir(tmp.path());
  EXPECT_EQ(q.method, QuantMethod::kFp8Block);
  EXPECT_EQ(q.block_n, 128);
  EXPECT_EQ(q.block_k, 128);
  EXPECT_FALSE(q.IsQuantized("lm_head"));
  const Checkpoint c = Checkpoint::Open(tmp.path());
  EXPECT_EQ(c.names().size(), 3u + 2 * 18);  // 7 linears a layer, each with weight_scale_inv
  const std::string down = "model.layers.1.mlp.down_proj";
  EXPECT_TRUE(q.IsQuantized(down));
  const vt::Tensor w = c.GetAs(down + ".weight", vt::DType::kF8E4M3, {128, 384});
  const vt::Tensor s = c.GetAs(down + ".weight_scale_inv", vt::DType::kF32, {1, 3});
  double sum2 = 0;
  for (int64_t b = 0; b < 3; ++b) {  // each block's largest decoded weight is 448 x its scale
    const float sc = s.data_as<float>()[b];
    double amax = 0;
    for (int64_t n = 0; n < 128; ++n)
      for (int64_t k = 128 * b; k < 128 * b + 128; ++k) {
        const double v = vt::Fp8E4M3ToFloat(w.data_as<uint8_t>()[n * 384 + k]) * sc;
        amax = std::max(amax, std::fabs(v));
        sum2 += v * v;
      }
    EXPECT_FLOAT_EQ(amax, 448.0 * sc) << "block " << b;
  }
  EXPECT_NEAR(std::sqrt(sum2 / w.numel()), 0.02, 0.002);
  c.GetAs("model.layers.0.self_attn.q_proj.weight_scale_inv", vt::DType::kF32, {1, 1});
}

// --format fp8-block of a MoE preset: the experts block FP8 as well (weight_scale_inv per
// expert projection), the router BF16 without scales (the loader keeps it as stored); the
// checkpoint loads with its experts as block FP8.
TEST(Checkpoint, RandomCheckpointGeneratorBlockFp8Moe) {
  const std::string tool = std::string(VTLLM_BINARY_DIR) + "/tools/make_random_checkpoint";
  TempDir tmp;
  const std::string cmd = tool + " --out " + tmp.path() +
                          " --preset qwen3-moe-tiny --seed 5 --threads 2 --format fp8-block 2>/dev/null";
  ASSERT_EQ(std::system((VTLLM_TOOL_RUNNER + cmd).c_str()), 0) << cmd;
  const QuantConfig q = QuantConfig::FromDir(tmp.path());
  EXPECT_EQ(q.method, QuantMethod::kFp8Block);
  const Checkpoint c = Checkpoint::Open(tmp.path());
  EXPECT_EQ(c.Info("model.layers.1.mlp.gate.weight").dtype, vt::DType::kBF16);
  const std::string expert = "model.layers.1.mlp.experts.3.down_proj";
  EXPECT_TRUE(q.IsQuantized(expert));
  EXPECT_EQ(c.Info(expert + ".weight").dtype, vt::DType::kF8E4M3);
  EXPECT_TRUE(c.Has(expert + ".weight_scale_inv"));
  const auto model =
      Model::Load(tmp.path(), {.device = vt::Device::Cpu(), .dtype = vt::DType::kF32, .cpu_threads = 2, .progress = false});
  EXPECT_EQ(model->quant().method, QuantMethod::kFp8Block);
}

// --preset qwen3.5-35b-a3b's config in every format (--config-only: the weights of 40 such layers
// are tens of GB): Qwen3.5-35B-A3B's text model nested under text_config, and --layers keeps the
// 3:1 layer pattern. fp8-block keeps what the FP8 releases keep in BF16.
TEST(Checkpoint, RandomCheckpointGeneratorQwen35MoeConfig) {
  for (const std::string format : {"bf16", "fp8-modelopt", "fp8-compressed-tensors", "fp8-block"}) {
    for (int layers : {0, 6}) {
      SCOPED_TRACE(format + (layers ? " --layers 6" : ""));
      TempDir tmp;
      ASSERT_TRUE(testing::RunRandomCheckpoint(
          tmp.path(), "--preset qwen3.5-35b-a3b --config-only --format " + format +
                          (layers ? " --layers " + std::to_string(layers) : std::string())));
      EXPECT_FALSE(std::filesystem::exists(tmp / "model.safetensors"));
      const ModelConfig c = ModelConfig::FromDir(tmp.path());
      EXPECT_EQ(c.architecture, "Qwen3_5MoeForCausalLM");
      EXPECT_EQ(c.model_type, "qwen3_5_moe_text");
      EXPECT_TRUE(c.nested_text_config);
      const int64_t L = layers ? layers : 40;
      EXPECT_EQ(c.num_hidden_layers, L);
      ASSERT_EQ(static_cast<int64_t>(c.layer_types.size()), L);
      for (int64_t l = 0; l < L; ++l)
        EXPECT_EQ(c.IsLinearAttentionLayer(l), (l + 1) % 4 != 0) << "layer " << l;
      EXPECT_EQ(c.hidden_size, 2048);
      EXPECT_EQ(c.vocab_size, 248320);
      EXPECT_EQ(c.num_attention_heads, 16);
      EXPECT_EQ(c.num_key_value_heads, 2);
      EXPECT_EQ(c.head_dim, 256);
      EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
      EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);
      EXPECT_TRUE(c.attn_output_gate);
      EXPECT_EQ(c.linear_num_key_heads, 16);
      EXPECT_EQ(c.linear_num_value_heads, 32);
      EXPECT_EQ(c.linear_key_head_dim, 128);
      EXPECT_EQ(c.linear_value_head_dim, 128);
      EXPECT_EQ(c.linear_conv_kernel_dim, 4);
      EXPECT_EQ(c.num_experts, 256);
      EXPECT_EQ(c.num_experts_per_tok, 8);
      EXPECT_EQ(c.moe_intermediate_size, 512);
      EXPECT_EQ(c.shared_expert_intermediate_size, 512);
      EXPECT_TRUE(c.norm_topk_prob);
      EXPECT_EQ(c.max_position_embeddings, 262144);
      EXPECT_FALSE(c.tie_word_embeddings);
      const QuantConfig q = QuantConfig::FromDir(tmp.path());
      if (format != "fp8-block") {
        EXPECT_EQ(q.method, format == "bf16" ? QuantMethod::kNone : QuantMethod::kFp8Static);
        continue;
      }
      EXPECT_EQ(q.method, QuantMethod::kFp8Block);
      EXPECT_EQ(q.block_n, 128);
      EXPECT_EQ(q.block_k, 128);
      const std::string p = "model.language_model.layers.";
      for (const std::string& m : {p + "0.linear_attn.in_proj_qkv", p + "0.linear_attn.in_proj_z",
                                   p + "0.linear_attn.out_proj", p + "3.self_attn.q_proj", p + "3.self_attn.o_proj",
                                   p + "5.mlp.experts.255.down_proj", p + "5.mlp.shared_expert.gate_proj"})
        EXPECT_TRUE(q.IsQuantized(m)) << m;
      for (const std::string& m : {p + "0.linear_attn.in_proj_a", p + "0.linear_attn.in_proj_b", p + "5.mlp.gate",
                                   p + "5.mlp.shared_expert_gate", std::string("lm_head")})
        EXPECT_FALSE(q.IsQuantized(m)) << m;
    }
  }
}

// The tiny hybrids in every format: the layout of their weights (Qwen3-Next's fused
// in_proj_qkvz / in_proj_ba under model.*, Qwen3.5's split projections under
// model.language_model.*, its BF16 experts fused, its FP8 ones per expert), block FP8's scale
// grids (each block's largest decoded weight 448 times its scale), and a load that runs.
TEST(Checkpoint, RandomCheckpointGeneratorHybridTiny) {
  for (const std::string preset : {"qwen3-next-tiny", "qwen3.5-moe-tiny"}) {
    for (const std::string format : {"bf16", "fp8-modelopt", "fp8-compressed-tensors", "fp8-block"}) {
      SCOPED_TRACE(preset + " " + format);
      TempDir tmp;
      ASSERT_TRUE(testing::RunRandomCheckpoint(tmp.path(), "--preset " + preset + " --seed 5 --threads 2 --format " + format));
      const bool q35 = preset == "qwen3.5-moe-tiny", fp8 = format != "bf16", block = format == "fp8-block";
      const Checkpoint c = Checkpoint::Open(tmp.path());
      const std::string la = std::string(q35 ? "model.language_model." : "model.") + "layers.1.linear_attn.";
      const std::string mlp = std::string(q35 ? "model.language_model." : "model.") + "layers.3.mlp.";
      const vt::DType w8 = fp8 ? vt::DType::kF8E4M3 : vt::DType::kBF16;
      std::string big;  // a block-FP8 weight of several blocks both ways
      if (q35) {
        c.GetAs(la + "in_proj_qkv.weight", w8, {352, 192});
        c.GetAs(la + "in_proj_z.weight", w8, {160, 192});
        for (const char* ba : {"in_proj_b.weight", "in_proj_a.weight"})
          c.GetAs(la + ba, block ? vt::DType::kBF16 : w8, {4, 192});
        big = la + "in_proj_qkv";
      } else {
        c.GetAs(la + "in_proj_qkvz.weight", w8, {512, 192});
        c.GetAs(la + "in_proj_ba.weight", block ? vt::DType::kBF16 : w8, {8, 192});
        big = la + "in_proj_qkvz";
      }
      EXPECT_EQ(c.Has(mlp + "experts.gate_up_proj"), q35 && !fp8);
      if (q35 && !fp8) {
        c.GetAs(mlp + "experts.gate_up_proj", vt::DType::kBF16, {8, 320, 192});
        c.GetAs(mlp + "experts.down_proj", vt::DType::kBF16, {8, 192, 160});
      } else {
        c.GetAs(mlp + "experts.7.down_proj.weight", w8, {192, 160});
      }
      c.GetAs(mlp + "gate.weight", vt::DType::kBF16, {8, 192});
      c.GetAs(mlp + "shared_expert_gate.weight", vt::DType::kBF16, {1, 192});
      if (block) {
        EXPECT_EQ(c.Info(mlp + "experts.7.down_proj.weight_scale_inv").shape, (vt::Shape{2, 2}));
        const vt::Tensor w = c.Get(big + ".weight");
        const int64_t N = w.dim(0), K = 192, nb = (N + 127) / 128;
        const vt::Tensor s = c.GetAs(big + ".weight_scale_inv", vt::DType::kF32, {nb, 2});
        for (int64_t bi = 0; bi < nb; ++bi)
          for (int64_t bj = 0; bj < 2; ++bj) {
            const float sc = s.data_as<float>()[bi * 2 + bj];
            double amax = 0;
            for (int64_t n = bi * 128; n < std::min(N, bi * 128 + 128); ++n)
              for (int64_t k = bj * 128; k < std::min(K, bj * 128 + 128); ++k)
                amax = std::max(amax, std::fabs(vt::Fp8E4M3ToFloat(w.data_as<uint8_t>()[n * K + k]) * double(sc)));
            EXPECT_FLOAT_EQ(amax, 448.0 * sc) << big << " block " << bi << ", " << bj;
          }
      }
      const auto model =
          Model::Load(tmp.path(), {.device = vt::Device::Cpu(), .dtype = vt::DType::kF32, .cpu_threads = 2, .progress = false});
      EXPECT_EQ(model->quant().method, !fp8 ? QuantMethod::kNone : block ? QuantMethod::kFp8Block : QuantMethod::kFp8Static);
      for (float v : testing::PromptLogits(*model, {3, 100, 511, 7})) ASSERT_TRUE(std::isfinite(v));
    }
  }
}

}  // namespace
}  // namespace vtllm::model
