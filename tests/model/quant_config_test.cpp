// QuantConfig: detection of static per-tensor FP8 in the ModelOpt and compressed-tensors
// spellings, which modules they cover, and every other scheme refused by name.
#include <gtest/gtest.h>

#include "loader_test_util.h"
#include "model/quant_config.h"

namespace vtllm::model {
namespace {

using nlohmann::json;
using testing::ExpectLoadError;
using testing::TempDir;

const json kBaseConfig = {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}};

// Static per-tensor FP8 arguments as llm-compressor writes them.
json Fp8TensorArgs() {
  return {{"actorder", nullptr}, {"block_structure", nullptr}, {"dynamic", false}, {"group_size", nullptr},
          {"num_bits", 8},       {"observer", "minmax"},       {"observer_kwargs", json::object()},
          {"strategy", "tensor"}, {"symmetric", true},        {"type", "float"}};
}

// A compressed-tensors quantization_config in the layout llm-compressor saves.
json CompressedTensors() {
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"global_compression_ratio", 1.24},
          {"quantization_status", "compressed"},
          {"kv_cache_scheme", nullptr},
          {"sparsity_config", json::object()},
          {"ignore", {"lm_head"}},
          {"config_groups",
           {{"group_0",
             {{"input_activations", Fp8TensorArgs()}, {"output_activations", nullptr},
              {"targets", {"Linear"}}, {"weights", Fp8TensorArgs()}}}}}};
}

QuantConfig Load(const TempDir& tmp, const json& quantization_config, const json* hf_quant = nullptr) {
  json cfg = kBaseConfig;
  if (!quantization_config.is_null()) cfg["quantization_config"] = quantization_config;
  testing::WriteJson(tmp / "config.json", cfg);
  if (hf_quant) testing::WriteJson(tmp / "hf_quant_config.json", *hf_quant);
  return QuantConfig::FromDir(tmp.path());
}

TEST(QuantConfig, NoneForTheBf16Fixture) {
  const QuantConfig q = QuantConfig::FromDir(testing::FixtureDir("bf16"));
  EXPECT_EQ(q.method, QuantMethod::kNone);
  EXPECT_EQ(q.format, "");
  EXPECT_FALSE(q.IsQuantized("model.layers.0.self_attn.q_proj"));
}

TEST(QuantConfig, ModelOptFixture) {
  const QuantConfig q = QuantConfig::FromDir(testing::FixtureDir("fp8_modelopt"));
  EXPECT_EQ(q.method, QuantMethod::kFp8Static);
  EXPECT_EQ(q.format, "modelopt");
  EXPECT_EQ(q.ignore, std::vector<std::string>{"lm_head"});
  EXPECT_TRUE(q.IsQuantized("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(q.IsQuantized("model.layers.2.mlp.down_proj"));
  EXPECT_TRUE(q.IsQuantized("model.layers.1.self_attn.qkv_proj"));
  EXPECT_TRUE(q.IsQuantized("model.layers.1.mlp.gate_up_proj"));
  EXPECT_FALSE(q.IsQuantized("lm_head"));
}

TEST(QuantConfig, ModelOptFromHfQuantConfigAloneWithGlobs) {
  TempDir tmp;
  const json hf = {{"producer", {{"name", "modelopt"}, {"version", "0.19.0"}}},
                   {"quantization", {{"quant_algo", "FP8"}, {"kv_cache_quant_algo", "FP8"},
                                     {"exclude_modules", {"lm_head", "model.layers.*.mlp", "model.layers.1.self_attn.o_proj"}}}}};
  const QuantConfig q = Load(tmp, nullptr, &hf);
  EXPECT_EQ(q.method, QuantMethod::kFp8Static);
  EXPECT_EQ(q.format, "modelopt");
  EXPECT_TRUE(q.IsQuantized("model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(q.IsQuantized("model.layers.0.mlp.down_proj")) << "a glob on the parent module";
  EXPECT_FALSE(q.IsQuantized("model.layers.17.mlp.gate_up_proj"));
  EXPECT_FALSE(q.IsQuantized("model.layers.1.self_attn.o_proj"));
  EXPECT_TRUE(q.IsQuantized("model.layers.2.self_attn.o_proj"));
  EXPECT_FALSE(q.IsQuantized("lm_head"));
}

TEST(QuantConfig, ModelOptBothFilesMergeExclusions) {
  TempDir tmp;
  const json hf = {{"quantization", {{"quant_algo", "FP8"}, {"exclude_modules", {"lm_head", "model.layers.0.*"}}}}};
  const QuantConfig q =
      Load(tmp, {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}, {"exclude_modules", {"lm_head"}}}, &hf);
  EXPECT_EQ(q.ignore, (std::vector<std::string>{"lm_head", "model.layers.0.*"}));
  EXPECT_FALSE(q.IsQuantized("model.layers.0.mlp.up_proj"));
  EXPECT_TRUE(q.IsQuantized("model.layers.10.mlp.up_proj"));
}

TEST(QuantConfig, CompressedTensorsStaticPerTensor) {
  TempDir tmp;
  json qc = CompressedTensors();
  qc["ignore"] = {"lm_head", "re:.*layers\\.0\\..*", "model.layers.3.self_attn"};
  const QuantConfig q = Load(tmp, qc);
  EXPECT_EQ(q.method, QuantMethod::kFp8Static);
  EXPECT_EQ(q.format, "compressed-tensors");
  EXPECT_FALSE(q.IsQuantized("lm_head"));
  EXPECT_FALSE(q.IsQuantized("model.layers.0.mlp.up_proj")) << "re: regex";
  EXPECT_TRUE(q.IsQuantized("model.layers.10.mlp.up_proj")) << "the regex must not match layer 10";
  EXPECT_FALSE(q.IsQuantized("model.layers.3.self_attn.k_proj")) << "an ignored parent module";
  EXPECT_FALSE(q.IsQuantized("model.layers.3.self_attn.qkv_proj"));
  EXPECT_TRUE(q.IsQuantized("model.layers.4.self_attn.qkv_proj"));
  // naive-quantized stores the same FP8 tensors.
  TempDir tmp2;
  qc["format"] = "naive-quantized";
  EXPECT_EQ(Load(tmp2, qc).method, QuantMethod::kFp8Static);
}

TEST(QuantConfig, CompressedTensorsTargetsRestrictQuantizedModules) {
  TempDir tmp;
  json qc = CompressedTensors();
  qc["config_groups"]["group_0"]["targets"] = {"re:.*mlp\\..*_proj$"};
  const QuantConfig q = Load(tmp, qc);
  EXPECT_TRUE(q.IsQuantized("model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(q.IsQuantized("model.layers.0.self_attn.q_proj"));
}

TEST(QuantConfig, MergedShardsMustAgree) {
  TempDir tmp;
  json qc = CompressedTensors();
  qc["ignore"] = {"model.layers.0.self_attn.k_proj"};
  const QuantConfig q = Load(tmp, qc);
  ExpectLoadError([&] { q.IsQuantized("model.layers.0.self_attn.qkv_proj"); },
                  {"model.layers.0.self_attn.qkv_proj", "k_proj", "disagree"});
  EXPECT_TRUE(q.IsQuantized("model.layers.1.self_attn.qkv_proj"));
}

// Every scheme that is not static per-tensor FP8 W8A8 is refused, naming what it is.
TEST(QuantConfig, UnsupportedSchemesAreNamed) {
  struct Case {
    std::string what;
    std::function<void(json& qc, json& hf)> edit;  // qc: quantization_config; hf: hf_quant_config.json (null: none)
    std::vector<std::string> needles;
  };
  auto ct = [](std::function<void(json&)> f) {
    return [f](json& qc, json&) {
      qc = CompressedTensors();
      f(qc);
    };
  };
  const Case cases[] = {
      {"gptq", [](json& qc, json&) { qc = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}}; },
       {"config.json", "quantization_config.quant_method", "\"gptq\"", "not supported yet"}},
      {"awq", [](json& qc, json&) { qc = {{"quant_method", "awq"}, {"bits", 4}}; }, {"\"awq\"", "not supported yet"}},
      {"fp8 without blocks", [](json& qc, json&) { qc = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}}; },
       {"weight_block_size", "without block scales", "not supported yet"}},
      {"fp8 static", [](json& qc, json&) {
         qc = {{"quant_method", "fp8"}, {"activation_scheme", "static"}, {"weight_block_size", {128, 128}}};
       }, {"activation_scheme", "\"static\"", "not supported yet"}},
      {"fp8 bad blocks", [](json& qc, json&) {
         qc = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 0}}};
       }, {"weight_block_size", "two positive integers"}},
      {"bitsandbytes", [](json& qc, json&) { qc = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}}; },
       {"\"bitsandbytes\"", "not supported yet"}},
      {"no method", [](json& qc, json&) { qc = {{"bits", 4}}; }, {"missing field 'quantization_config.quant_method'"}},
      {"modelopt nvfp4", [](json& qc, json&) { qc = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}}; },
       {"quantization_config.quant_algo", "\"NVFP4\"", "not supported yet"}},
      {"hf_quant nvfp4", [](json&, json& hf) { hf = {{"quantization", {{"quant_algo", "NVFP4"}}}}; },
       {"hf_quant_config.json", "quantization.quant_algo", "\"NVFP4\"", "not supported yet"}},
      {"hf_quant per-channel",
       [](json&, json& hf) { hf = {{"quantization", {{"quant_algo", "FP8_PER_CHANNEL_PER_TOKEN"}}}}; },
       {"hf_quant_config.json", "FP8_PER_CHANNEL_PER_TOKEN", "not supported yet"}},
      {"ct channel weights", ct([](json& qc) { qc["config_groups"]["group_0"]["weights"]["strategy"] = "channel"; }),
       {"quantization_config.config_groups.group_0.weights.strategy", "\"channel\"", "not supported yet"}},
      {"ct block weights",
       ct([](json& qc) {
         qc["config_groups"]["group_0"]["weights"]["strategy"] = "block";
         qc["config_groups"]["group_0"]["weights"]["block_structure"] = {128, 128};
       }),
       {"weights.strategy", "\"block\"", "not supported yet"}},
      {"ct dynamic activations",
       ct([](json& qc) {
         qc["config_groups"]["group_0"]["input_activations"]["dynamic"] = true;
         qc["config_groups"]["group_0"]["input_activations"]["strategy"] = "token";
       }),
       {"input_activations.strategy", "\"token\"", "not supported yet"}},
      {"ct dynamic tensor activations",
       ct([](json& qc) { qc["config_groups"]["group_0"]["input_activations"]["dynamic"] = true; }),
       {"input_activations.strategy", "\"tensor\"", "per token only", "not supported yet"}},
      {"ct int8", ct([](json& qc) { qc["config_groups"]["group_0"]["weights"]["type"] = "int"; }),
       {"weights.type", "\"int\"", "not supported yet"}},
      {"ct nvfp4",
       ct([](json& qc) {
         qc["format"] = "nvfp4-pack-quantized";
         qc["config_groups"]["group_0"]["weights"]["num_bits"] = 4;
       }),
       {"quantization_config.format", "nvfp4-pack-quantized", "not supported yet"}},
      {"ct weight only", ct([](json& qc) { qc["config_groups"]["group_0"]["input_activations"] = nullptr; }),
       {"group_0.input_activations", "weight-only", "not supported yet"}},
      {"ct 2:4 sparsity", ct([](json& qc) { qc["sparsity_config"] = {{"format", "sparse-24-bitmask"}}; }),
       {"sparsity_config", "sparse-24-bitmask", "not supported yet"}},
      {"ct no groups", ct([](json& qc) { qc.erase("config_groups"); }),
       {"missing field 'quantization_config.config_groups'"}},
      {"ct bad regex", ct([](json& qc) { qc["ignore"] = {"re:(unclosed"}; }), {"re:(unclosed", "regex"}},
      {"ct and modelopt", [](json& qc, json& hf) {
         qc = CompressedTensors();
         hf = {{"quantization", {{"quant_algo", "FP8"}}}};
       }, {"hf_quant_config.json", "compressed-tensors", "ambiguous"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir tmp;
    json qc = nullptr, hf = nullptr;
    c.edit(qc, hf);
    ExpectLoadError([&] { Load(tmp, qc, hf.is_null() ? nullptr : &hf); }, c.needles);
  }
}

}  // namespace
}  // namespace vtllm::model

namespace vtllm::model {
namespace {

// quant_method fp8 with a weight block size (the official Qwen3-*-FP8 config) and
// compressed-tensors per-channel weights with dynamic per-token activations.
TEST(QuantConfig, DynamicFp8Formats) {
  {
    TempDir tmp;
    testing::WriteJson(tmp / "config.json",
                       {{"quantization_config", {{"quant_method", "fp8"}, {"fmt", "e4m3"},
                                                 {"activation_scheme", "dynamic"},
                                                 {"weight_block_size", {128, 64}},
                                                 {"modules_to_not_convert", {"lm_head", "mlp.gate"}}}}});
    const QuantConfig q = QuantConfig::FromDir(tmp.path());
    EXPECT_EQ(q.method, QuantMethod::kFp8Block);
    EXPECT_EQ(q.block_n, 128);
    EXPECT_EQ(q.block_k, 64);
    EXPECT_TRUE(q.IsQuantized("model.layers.0.self_attn.qkv_proj"));
    EXPECT_FALSE(q.IsQuantized("lm_head"));
    EXPECT_FALSE(q.IsQuantized("model.layers.3.mlp.gate"));  // a substring of the name, as transformers
  }
  {
    TempDir tmp;
    json qc = CompressedTensors();
    qc["config_groups"]["group_0"]["weights"]["strategy"] = "channel";
    qc["config_groups"]["group_0"]["input_activations"]["strategy"] = "token";
    qc["config_groups"]["group_0"]["input_activations"]["dynamic"] = true;
    testing::WriteJson(tmp / "config.json", {{"quantization_config", qc}});
    const QuantConfig q = QuantConfig::FromDir(tmp.path());
    EXPECT_EQ(q.method, QuantMethod::kFp8ChannelToken);
    EXPECT_TRUE(q.IsQuantized("model.layers.0.mlp.down_proj"));
  }
}

}  // namespace
}  // namespace vtllm::model
