// The hybrid (Gated DeltaNet) config fields: Qwen3-Next's flat config with
// full_attention_interval, Qwen3.5's explicit layer_types nested under text_config, partial
// rotary in either spelling, and errors naming the field.
#include <gtest/gtest.h>

#include "loader_test_util.h"
#include "model/config.h"

namespace vtllm::model {
namespace {

using nlohmann::json;
using testing::ExpectLoadError;
using testing::TempDir;

// Qwen3-Next-80B-A3B's config.json (the fields that matter): no layer_types.
json Qwen3NextConfig() {
  return json::parse(R"({
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
    "hidden_size": 2048, "intermediate_size": 5120, "num_hidden_layers": 48,
    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 151936,
    "max_position_embeddings": 262144, "rms_norm_eps": 1e-06, "rope_theta": 10000000,
    "partial_rotary_factor": 0.25, "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "norm_topk_prob": true, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "tie_word_embeddings": false, "torch_dtype": "bfloat16", "hidden_act": "silu"
  })");
}

// Qwen3.5's multimodal wrapper: the text model under text_config, rope in rope_parameters.
json Qwen3_5Config() {
  json text = json::parse(R"({
    "model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 384,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                        "mrope_section": [11, 11, 10], "mrope_interleaved": true},
    "layer_types": ["linear_attention", "linear_attention", "full_attention", "linear_attention"],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 32,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "dtype": "bfloat16"
  })");
  json j = {{"architectures", {"Qwen3_5ForConditionalGeneration"}}, {"model_type", "qwen3_5"},
            {"text_config", text}, {"vision_config", {{"depth", 2}}}};
  return j;
}

ModelConfig Parse(const json& j) {
  TempDir tmp;
  testing::WriteText(tmp / "config.json", j.dump());
  return ModelConfig::FromDir(tmp.path());
}

TEST(ModelConfigHybrid, Qwen3NextLayerTypesFromTheInterval) {
  const ModelConfig c = Parse(Qwen3NextConfig());
  ASSERT_TRUE(c.IsHybrid());
  ASSERT_EQ(c.layer_types.size(), 48u);
  for (int64_t i = 0; i < 48; ++i)
    EXPECT_EQ(c.IsLinearAttentionLayer(i), (i + 1) % 4 != 0) << "layer " << i;
  EXPECT_EQ(c.linear_num_value_heads, 32);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_TRUE(c.attn_output_gate);
  EXPECT_EQ(c.shared_expert_intermediate_size, 512);
  EXPECT_TRUE(c.IsSparseLayer(0));
  EXPECT_FALSE(c.nested_text_config);
  // HF's default interval is 4 when the config names neither.
  json j = Qwen3NextConfig();
  j.erase("full_attention_interval");
  EXPECT_EQ(Parse(j).layer_types, c.layer_types);
  j["full_attention_interval"] = 2;
  EXPECT_EQ(Parse(j).layer_types[1], "full_attention");
  EXPECT_EQ(Parse(j).layer_types[2], "linear_attention");
}

TEST(ModelConfigHybrid, Qwen3_5TextConfigNested) {
  const ModelConfig c = Parse(Qwen3_5Config());
  EXPECT_TRUE(c.nested_text_config);
  EXPECT_EQ(c.architecture, "Qwen3_5ForConditionalGeneration");
  EXPECT_EQ(c.model_type, "qwen3_5_text");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.dtype, vt::DType::kBF16);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  const std::vector<std::string> want = {"linear_attention", "linear_attention", "full_attention", "linear_attention"};
  EXPECT_EQ(c.layer_types, want);
  EXPECT_EQ(c.num_experts, 0);
}

TEST(ModelConfigHybrid, BadValuesNameTheField) {
  struct Case {
    const char* field;
    json value;
    std::vector<std::string> needles;
  };
  const Case cases[] = {
      {"layer_types", {"linear_attention"}, {"'text_config.layer_types'", "list of 4 layer types"}},
      {"layer_types",
       {"linear_attention", "mamba", "full_attention", "linear_attention"},
       {"'text_config.layer_types'", "\"mamba\""}},
      {"linear_num_value_heads", 3, {"'text_config.linear_num_value_heads'", "multiple of linear_num_key_heads (2)"}},
      {"linear_conv_kernel_dim", 1, {"'text_config.linear_conv_kernel_dim'", "at least 2"}},
      {"linear_key_head_dim", nullptr, {"missing required field 'text_config.linear_key_head_dim'"}},
      {"partial_rotary_factor", 1.5, {"'text_config.partial_rotary_factor'", "(0, 1]"}},
      {"partial_rotary_factor", 0.3, {"'text_config.partial_rotary_factor'", "even number of rotary dims"}},
      {"attn_output_gate", "yes", {"'text_config.attn_output_gate'", "true or false"}},
  };
  for (const Case& c : cases) {
    json j = Qwen3_5Config();
    j["text_config"][c.field] = c.value;
    TempDir tmp;
    testing::WriteText(tmp / "config.json", j.dump());
    ExpectLoadError([&] { ModelConfig::FromDir(tmp.path()); }, c.needles);
  }
  json j = Qwen3NextConfig();
  j["full_attention_interval"] = 0;
  TempDir tmp;
  testing::WriteText(tmp / "config.json", j.dump());
  ExpectLoadError([&] { ModelConfig::FromDir(tmp.path()); }, {"'full_attention_interval'", "must be > 0"});
}

}  // namespace
}  // namespace vtllm::model
