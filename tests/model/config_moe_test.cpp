// Qwen3MoeForCausalLM's mixture-of-experts fields: the Qwen3-30B-A3B config, which layers
// are sparse (HF's rule), the defaults, and errors naming the field.
#include <gtest/gtest.h>

#include "loader_test_util.h"
#include "model/config.h"

namespace vtllm::model {
namespace {

using nlohmann::json;
using testing::ExpectLoadError;
using testing::TempDir;

// Qwen3-30B-A3B's config.json (the fields that matter), as transformers 4.51 wrote it.
json Qwen3MoeConfig() {
  return json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
    "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
    "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "hidden_act": "silu"
  })");
}

ModelConfig Parse(const json& j) {
  TempDir tmp;
  testing::WriteText(tmp / "config.json", j.dump());
  return ModelConfig::FromDir(tmp.path());
}

TEST(ModelConfigMoe, Qwen3_30B_A3B) {
  const ModelConfig c = Parse(Qwen3MoeConfig());
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 768);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.decoder_sparse_step, 1);
  for (int64_t l = 0; l < 48; ++l) EXPECT_TRUE(c.IsSparseLayer(l)) << l;
}

TEST(ModelConfigMoe, SparseLayersFollowHfsRule) {
  json j = Qwen3MoeConfig();
  j["num_hidden_layers"] = 8;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3, 4};
  const ModelConfig c = Parse(j);
  // sparse: not in mlp_only_layers and (i + 1) % 2 == 0 -> 1, 5, 7 (3 is listed dense)
  const bool want[8] = {false, true, false, false, false, true, false, true};
  for (int64_t l = 0; l < 8; ++l) EXPECT_EQ(c.IsSparseLayer(l), want[l]) << "layer " << l;
}

TEST(ModelConfigMoe, DefaultsAndTheMixtralSpelling) {
  json j = Qwen3MoeConfig();
  j.erase("norm_topk_prob");
  j.erase("decoder_sparse_step");
  j.erase("mlp_only_layers");
  j.erase("num_experts");
  j["num_local_experts"] = 16;
  j["num_experts_per_tok"] = 2;
  const ModelConfig c = Parse(j);
  EXPECT_EQ(c.num_experts, 16);
  EXPECT_FALSE(c.norm_topk_prob) << "HF's default";
  EXPECT_EQ(c.decoder_sparse_step, 1);
  EXPECT_TRUE(c.mlp_only_layers.empty());
  // A dense architecture has no experts, whatever its file says.
  json d = Qwen3MoeConfig();
  d["architectures"] = {"Qwen3ForCausalLM"};
  EXPECT_EQ(Parse(d).num_experts, 0);
  EXPECT_FALSE(Parse(d).IsSparseLayer(0));
}

TEST(ModelConfigMoe, BadValuesNameTheField) {
  struct Case {
    const char* field;
    json value;
    std::vector<std::string> needles;
  };
  const Case cases[] = {
      {"num_experts", 0, {"'num_experts'", "must be > 0, got 0"}},
      {"num_experts", nullptr, {"missing required field 'num_experts'"}},
      {"num_experts_per_tok", 129, {"'num_experts_per_tok'", "(129) must not exceed num_experts (128)"}},
      {"num_experts_per_tok", -1, {"'num_experts_per_tok'", "-1"}},
      {"moe_intermediate_size", "768", {"'moe_intermediate_size'", "integer"}},
      {"norm_topk_prob", 1, {"'norm_topk_prob'", "true or false"}},
      {"decoder_sparse_step", 0, {"'decoder_sparse_step'", "must be > 0"}},
      {"mlp_only_layers", {0, 48}, {"'mlp_only_layers'", "[0, 48)", "[0,48]"}},
      {"mlp_only_layers", 3, {"'mlp_only_layers'", "list of layer indices"}},
  };
  for (const Case& c : cases) {
    json j = Qwen3MoeConfig();
    j[c.field] = c.value;
    TempDir tmp;
    testing::WriteText(tmp / "config.json", j.dump());
    ExpectLoadError([&] { ModelConfig::FromDir(tmp.path()); }, c.needles);
  }
}

}  // namespace
}  // namespace vtllm::model

namespace vtllm::model {
namespace {

// Qwen2-MoE (Qwen1.5-MoE-A2.7B's fields): the same MoE fields and a required shared expert size.
TEST(ModelConfigMoe, Qwen2MoeNeedsItsSharedExpertSize) {
  json j = Qwen3MoeConfig();
  j["architectures"] = {"Qwen2MoeForCausalLM"};
  j["model_type"] = "qwen2_moe";
  j["norm_topk_prob"] = false;
  j["shared_expert_intermediate_size"] = 5632;
  const ModelConfig c = Parse(j);
  EXPECT_EQ(c.shared_expert_intermediate_size, 5632);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(Parse(Qwen3MoeConfig()).shared_expert_intermediate_size, 0);  // Qwen3-MoE has none
  for (const json& bad : {json(nullptr), json(0), json("5632")}) {
    json k = j;
    if (bad.is_null()) k.erase("shared_expert_intermediate_size");
    else k["shared_expert_intermediate_size"] = bad;
    TempDir tmp;
    testing::WriteText(tmp / "config.json", k.dump());
    ExpectLoadError([&] { ModelConfig::FromDir(tmp.path()); }, {"shared_expert_intermediate_size"});
  }
}

}  // namespace
}  // namespace vtllm::model
