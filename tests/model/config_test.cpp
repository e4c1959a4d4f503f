// ModelConfig and GenerationConfig: transformers-5 files (the fixtures), the older
// spelling, defaults, rope scaling, and errors naming config.json and the field.
#include <gtest/gtest.h>

#include "loader_test_util.h"
#include "model/config.h"

namespace vtllm::model {
namespace {

using nlohmann::json;
using testing::ExpectLoadError;
using testing::TempDir;

TEST(ModelConfig, TransformersFiveFixture) {
  const ModelConfig c = ModelConfig::FromDir(testing::FixtureDir("bf16"));
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.intermediate_size, 384);
  EXPECT_EQ(c.num_hidden_layers, 3);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position_embeddings, 1024);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e6) << "from rope_parameters.rope_theta";
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.dtype, vt::DType::kBF16) << "from dtype";
  EXPECT_TRUE(c.eos_token_ids.empty()) << "eos_token_id is null";
  EXPECT_EQ(c.bos_token_id, -1);
  // The FP8 fixture's config describes the same model.
  const ModelConfig q = ModelConfig::FromDir(testing::FixtureDir("fp8_modelopt"));
  EXPECT_EQ(q.hidden_size, c.hidden_size);
  EXPECT_EQ(q.rope_theta, c.rope_theta);
}

// A Llama 3.1 config as older transformers wrote it (top-level rope_theta, rope_scaling,
// torch_dtype), without head_dim.
const char* kLlamaOld = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
  "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "hidden_act": "silu",
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]
})";

TEST(ModelConfig, OlderSpellingWithLlama3Scaling) {
  TempDir tmp;
  testing::WriteText(tmp / "config.json", kLlamaOld);
  const ModelConfig c = ModelConfig::FromDir(tmp.path());
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.head_dim, 128) << "hidden_size / num_attention_heads";
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.dtype, vt::DType::kBF16) << "from torch_dtype";
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.bos_token_id, 128000);
}

TEST(ModelConfig, TransformersFiveLlama3Scaling) {
  TempDir tmp;
  json j = json::parse(kLlamaOld);
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j.erase("torch_dtype");
  j["dtype"] = "float16";
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 32.0},
                          {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  testing::WriteJson(tmp / "config.json", j);
  const ModelConfig c = ModelConfig::FromDir(tmp.path());
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.dtype, vt::DType::kF16);
}

TEST(ModelConfig, DefaultsAndQwen2Bias) {
  TempDir tmp;
  testing::WriteJson(tmp / "config.json", {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"},
                                           {"hidden_size", 896}, {"intermediate_size", 4864},
                                           {"num_hidden_layers", 24}, {"num_attention_heads", 14},
                                           {"vocab_size", 151936}, {"eos_token_id", 151645},
                                           {"rope_scaling", nullptr}, {"tie_word_embeddings", true}});
  const ModelConfig c = ModelConfig::FromDir(tmp.path());
  EXPECT_EQ(c.num_key_value_heads, 14) << "defaults to num_attention_heads";
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.attention_bias) << "Qwen2 always has q/k/v bias";
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.dtype, vt::DType::kF32) << "no dtype recorded: float32, as HF reads it";
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
}

TEST(ModelConfig, UnsupportedRopeTypesAreNamed) {
  for (const std::string type : {"yarn", "linear", "dynamic", "longrope"}) {
    TempDir tmp;
    json j = json::parse(kLlamaOld);
    j["rope_scaling"] = {{"type", type}, {"factor", 4.0}};
    testing::WriteJson(tmp / "config.json", j);
    ExpectLoadError([&] { ModelConfig::FromDir(tmp.path()); },
                    {"config.json", "'" + type + "'", "rope_scaling.type", "not supported yet"});
  }
  TempDir tmp;
  json j = json::parse(kLlamaOld);
  j["rope_scaling"].erase("low_freq_factor");
  testing::WriteJson(tmp / "config.json", j);
  ExpectLoadError([&] { ModelConfig::FromDir(tmp.path()); }, {"config.json", "rope_scaling.low_freq_factor"});
}

TEST(ModelConfig, BadFieldsAreNamedWithTheirValues) {
  struct Case {
    std::string field;
    json value;  // null: remove the field
    std::vector<std::string> needles;
  };
  const Case cases[] = {
      {"hidden_size", nullptr, {"missing required field 'hidden_size'"}},
      {"hidden_size", "4096", {"'hidden_size'", "integer", "\"4096\""}},
      {"hidden_size", 4096.5, {"'hidden_size'", "integer", "4096.5"}},
      {"num_attention_heads", 0, {"'num_attention_heads'", "> 0", "0"}},
      {"num_key_value_heads", 5, {"'num_key_value_heads'", "(5)", "32"}},
      {"vocab_size", json::array(), {"'vocab_size'", "array"}},
      {"architectures", "LlamaForCausalLM", {"'architectures'", "list"}},
      {"rms_norm_eps", "tiny", {"'rms_norm_eps'", "number"}},
      {"tie_word_embeddings", 1, {"'tie_word_embeddings'", "true or false"}},
      {"torch_dtype", "int4", {"'torch_dtype'", "'int4'"}},
      {"eos_token_id", "x", {"'eos_token_id'", "integer"}},
      {"rope_theta", -1.0, {"'rope_theta'", "> 0"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.field + " = " + c.value.dump());
    TempDir tmp;
    json j = json::parse(kLlamaOld);
    if (c.value.is_null()) j.erase(c.field); else j[c.field] = c.value;
    testing::WriteJson(tmp / "config.json", j);
    auto needles = c.needles;
    needles.push_back(tmp / "config.json");
    ExpectLoadError([&] { ModelConfig::FromDir(tmp.path()); }, needles);
  }
}

TEST(ModelConfig, MissingOrBrokenFile) {
  TempDir tmp;
  ExpectLoadError([&] { ModelConfig::FromDir(tmp.path()); }, {tmp / "config.json", "cannot open"});
  testing::WriteText(tmp / "config.json", "{\"hidden_size\": 12,");
  ExpectLoadError([&] { ModelConfig::FromDir(tmp.path()); }, {tmp / "config.json", "not valid JSON"});
  testing::WriteText(tmp / "config.json", "[1, 2]");
  ExpectLoadError([&] { ModelConfig::FromDir(tmp.path()); }, {tmp / "config.json", "JSON object"});
}

TEST(GenerationConfig, FixtureAndValues) {
  // The fixture's generation_config.json sets no sampling fields.
  const GenerationConfig f = GenerationConfig::FromDir(testing::FixtureDir("bf16"));
  EXPECT_EQ(f.temperature, 1.0);
  EXPECT_EQ(f.top_p, 1.0);
  EXPECT_EQ(f.top_k, 0);
  EXPECT_TRUE(f.eos_token_ids.empty());

  TempDir tmp;
  const GenerationConfig none = GenerationConfig::FromDir(tmp.path());  // no file: defaults
  EXPECT_EQ(none.temperature, 1.0);
  // Qwen3-0.6B's generation_config.json.
  testing::WriteText(tmp / "generation_config.json",
                     R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
                         "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
                         "transformers_version": "4.51.0"})");
  const GenerationConfig g = GenerationConfig::FromDir(tmp.path());
  EXPECT_EQ(g.temperature, 0.6);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_EQ(g.top_p, 0.95);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  EXPECT_EQ(g.bos_token_id, 151643);
  testing::WriteText(tmp / "generation_config.json", R"({"temperature": "hot"})");
  ExpectLoadError([&] { GenerationConfig::FromDir(tmp.path()); },
                  {"generation_config.json", "'temperature'", "\"hot\""});
  testing::WriteText(tmp / "generation_config.json", R"({"top_p": 1.5})");
  ExpectLoadError([&] { GenerationConfig::FromDir(tmp.path()); }, {"generation_config.json", "'top_p'", "1.5"});
}

}  // namespace
}  // namespace vtllm::model
