// Qwen3_5MoeForCausalLM (every layer a sparse MoE with a sigmoid-gated shared expert, GDN and
// gated attention as Qwen3.5) on checkpoints this test writes from tests/fixtures/models/
// qwen3_5-tiny: its attention, GDN, norms and embeddings, and per layer a router, 4 experts
// and a shared expert. Checks that do not need Hugging Face:
// - experts equal to the dense model's MLP, with the shared expert's down_proj zero, give the
//   dense model's logits (the renormalised top-k weights sum to 1, whatever the router picks);
// - the fused layout (experts.gate_up_proj [E, 2I, H] + experts.down_proj [E, H, I]) and the
//   per-expert layout of the same weights give identical logits;
// - malformed expert tensors and config fields are errors naming them;
// - the multimodal wrapper (Qwen3_5MoeForConditionalGeneration, text_config, model.language_model.*)
//   loads the same model.
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>

#include "loader_test_util.h"
#include "model/checkpoint.h"
#include "model/safetensors_writer.h"
#include "model_oracle.h"

namespace vtllm::model {
namespace {

const std::string kDense = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen3_5-tiny";
constexpr int64_t kE = 4, kTopK = 2, kI = 128, kS = 32;  // kI: qwen3_5-tiny's intermediate_size

struct MoeCheckpoint {
  bool fused = true;
  bool experts_as_dense = false;  // every expert = the dense MLP; the shared expert's output zero
  bool wrapper = false;           // Qwen3_5MoeForConditionalGeneration's layout
  bool both_layouts = false;      // layer 0's experts also per expert
  std::string bad_name = {};      // a tensor written with bad_shape instead
  vt::Shape bad_shape = {};
  nlohmann::json config_patch = nlohmann::json::object();  // RFC 7386 merge patch of the text config
};

std::vector<float> ToF32(const vt::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == vt::DType::kF32) {
    std::memcpy(out.data(), t.data(), out.size() * sizeof(float));
    return out;
  }
  EXPECT_EQ(t.dtype(), vt::DType::kBF16);
  const auto* p = static_cast<const uint16_t*>(t.data());
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
    std::memcpy(&out[i], &bits, sizeof(float));
  }
  return out;
}

void WriteMoe(const std::string& dir, const MoeCheckpoint& o) {
  std::ifstream f(kDense + "/config.json");
  nlohmann::json text = nlohmann::json::parse(f);
  const int64_t H = text["hidden_size"].get<int64_t>(), L = text["num_hidden_layers"].get<int64_t>();
  ASSERT_EQ(text["intermediate_size"].get<int64_t>(), kI);
  text.erase("intermediate_size");
  text["model_type"] = "qwen3_5_moe_text";
  text["num_experts"] = kE;
  text["num_experts_per_tok"] = kTopK;
  text["moe_intermediate_size"] = kI;
  text["shared_expert_intermediate_size"] = kS;
  text.merge_patch(o.config_patch);
  nlohmann::json config = text;
  config["architectures"] = {"Qwen3_5MoeForCausalLM"};
  if (o.wrapper) {
    text.erase("architectures");
    config = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
              {"model_type", "qwen3_5_moe"},
              {"text_config", text},
              {"vision_config", {{"depth", 1}}}};
  }
  testing::WriteJson(dir + "/config.json", config);

  const Checkpoint dense = Checkpoint::Open(kDense);
  const std::string root = o.wrapper ? "model.language_model." : "model.";
  SafetensorsWriter w;
  std::deque<std::vector<float>> keep;
  const auto add = [&](const std::string& name, const vt::Shape& shape, std::vector<float> v) {
    keep.push_back(std::move(v));
    const bool bad = name == o.bad_name;
    if (bad) {
      size_t n = 1;
      for (int64_t x : o.bad_shape) n *= static_cast<size_t>(x);
      keep.back().resize(n);
    }
    w.Add(name, vt::DType::kF32, bad ? o.bad_shape : shape, keep.back().data());
  };
  for (const std::string& n : dense.names()) {
    if (n.find(".mlp.") != std::string::npos) continue;
    w.Add(n.rfind("model.", 0) == 0 ? root + n.substr(6) : n, dense.Get(n));
  }
  std::mt19937 rng(1234);
  const auto random = [&](size_t n, double scale) {
    std::normal_distribution<float> d(0.0f, static_cast<float>(scale));
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
  };
  const double h_scale = 1.0 / std::sqrt(static_cast<double>(H)), i_scale = 1.0 / std::sqrt(double{kI});
  for (int64_t l = 0; l < L; ++l) {
    const std::string src = "model.layers." + std::to_string(l) + ".mlp.";
    const std::string p = root + "layers." + std::to_string(l) + ".mlp.";
    const std::vector<float> dg = ToF32(dense.Get(src + "gate_proj.weight"));
    const std::vector<float> du = ToF32(dense.Get(src + "up_proj.weight"));
    const std::vector<float> dd = ToF32(dense.Get(src + "down_proj.weight"));
    add(p + "gate.weight", {kE, H}, random(static_cast<size_t>(kE * H), 2 * h_scale));
    std::vector<std::vector<float>> g(kE), u(kE), d(kE);
    for (int64_t e = 0; e < kE; ++e) {
      g[e] = o.experts_as_dense ? dg : random(static_cast<size_t>(kI * H), h_scale);
      u[e] = o.experts_as_dense ? du : random(static_cast<size_t>(kI * H), h_scale);
      d[e] = o.experts_as_dense ? dd : random(static_cast<size_t>(H * kI), i_scale);
    }
    if (o.fused) {
      std::vector<float> gu, dn;
      for (int64_t e = 0; e < kE; ++e) {
        gu.insert(gu.end(), g[e].begin(), g[e].end());
        gu.insert(gu.end(), u[e].begin(), u[e].end());
        dn.insert(dn.end(), d[e].begin(), d[e].end());
      }
      add(p + "experts.gate_up_proj", {kE, 2 * kI, H}, gu);
      add(p + "experts.down_proj", {kE, H, kI}, dn);
    }
    if (!o.fused || (o.both_layouts && l == 0)) {
      for (int64_t e = 0; e < kE; ++e) {
        const std::string pe = p + "experts." + std::to_string(e) + ".";
        add(pe + "gate_proj.weight", {kI, H}, g[e]);
        add(pe + "up_proj.weight", {kI, H}, u[e]);
        add(pe + "down_proj.weight", {H, kI}, d[e]);
      }
    }
    add(p + "shared_expert.gate_proj.weight", {kS, H}, random(static_cast<size_t>(kS * H), h_scale));
    add(p + "shared_expert.up_proj.weight", {kS, H}, random(static_cast<size_t>(kS * H), h_scale));
    add(p + "shared_expert.down_proj.weight", {H, kS},
        o.experts_as_dense ? std::vector<float>(static_cast<size_t>(H * kS), 0.0f)
                           : random(static_cast<size_t>(H * kS), 1.0 / std::sqrt(double{kS})));
    add(p + "shared_expert_gate.weight", {1, H}, random(static_cast<size_t>(H), 2 * h_scale));
  }
  w.Write(dir + "/model.safetensors");
}

std::unique_ptr<Model> LoadMoe(const testing::TempDir& tmp, const MoeCheckpoint& o, const std::string& sub = "m") {
  const std::string dir = tmp.Sub(sub);
  WriteMoe(dir, o);
  return Model::Load(dir, testing::CpuOptions(vt::DType::kF32));
}

std::vector<int32_t> LongPrompt() { return testing::ReadOracle(kDense).back().prompt; }

TEST(Qwen3_5Moe, ExpertsEqualToTheDenseMlpGiveTheDenseModel) {
  testing::TempDir tmp;
  auto moe = LoadMoe(tmp, {.experts_as_dense = true});
  EXPECT_EQ(moe->config().architecture, "Qwen3_5MoeForCausalLM");
  EXPECT_EQ(moe->config().num_experts, kE);
  EXPECT_TRUE(moe->config().norm_topk_prob);
  for (int64_t l = 0; l < moe->config().num_hidden_layers; ++l) EXPECT_TRUE(moe->config().IsSparseLayer(l));
  auto dense = Model::Load(kDense, testing::CpuOptions(vt::DType::kF32));
  const std::vector<int32_t> prompt = LongPrompt();
  const double d = testing::MaxAbsDiff(testing::PromptLogits(*moe, prompt), testing::PromptLogits(*dense, prompt));
  std::printf("[qwen3.5-moe] experts = dense MLP: max |logit - dense| %.3g over %zu positions\n", d, prompt.size());
  EXPECT_LE(d, 1e-4);
}

TEST(Qwen3_5Moe, FusedAndPerExpertLayoutsGiveTheSameLogits) {
  testing::TempDir tmp;
  auto fused = LoadMoe(tmp, {.fused = true}, "fused");
  auto per_expert = LoadMoe(tmp, {.fused = false}, "per");
  auto dense = Model::Load(kDense, testing::CpuOptions(vt::DType::kF32));
  const std::vector<int32_t> prompt = LongPrompt();
  const std::vector<float> a = testing::PromptLogits(*fused, prompt);
  EXPECT_EQ(a, testing::PromptLogits(*per_expert, prompt));
  // Random experts make a different model from the dense one (the experts are used).
  EXPECT_GT(testing::MaxAbsDiff(a, testing::PromptLogits(*dense, prompt)), 0.1);
}

TEST(Qwen3_5Moe, WrapperLayoutLoadsTheSameModel) {
  testing::TempDir tmp;
  auto flat = LoadMoe(tmp, {}, "flat");
  auto wrapped = LoadMoe(tmp, {.wrapper = true}, "wrapped");
  EXPECT_TRUE(wrapped->config().nested_text_config);
  EXPECT_EQ(wrapped->config().architecture, "Qwen3_5MoeForConditionalGeneration");
  const std::vector<int32_t> prompt = testing::ReadOracle(kDense)[2].prompt;
  EXPECT_EQ(testing::PromptLogits(*wrapped, prompt), testing::PromptLogits(*flat, prompt));
}

TEST(Qwen3_5Moe, MalformedExpertTensorsAreErrorsNamingThem) {
  testing::TempDir tmp;
  const std::string gu = "model.layers.1.mlp.experts.gate_up_proj", dn = "model.layers.2.mlp.experts.down_proj";
  // gate_up_proj holding only one of gate / up, and down_proj stored transposed.
  testing::ExpectLoadError([&] { LoadMoe(tmp, {.bad_name = gu, .bad_shape = {kE, kI, 64}}, "a"); },
                           {gu, "[4, 128, 64]", "expected [4, 256, 64]", "gate rows, then up"});
  testing::ExpectLoadError([&] { LoadMoe(tmp, {.bad_name = dn, .bad_shape = {kE, kI, 64}}, "b"); },
                           {dn, "[4, 128, 64]", "expected [4, 64, 128]"});
  testing::ExpectLoadError([&] { LoadMoe(tmp, {.both_layouts = true}, "c"); },
                           {"model.layers.0.mlp.", "stored twice", "experts.0.gate_proj.weight"});
  const std::string pe = "model.layers.3.mlp.experts.2.down_proj.weight";
  testing::ExpectLoadError([&] { LoadMoe(tmp, {.fused = false, .bad_name = pe, .bad_shape = {kI, 64}}, "d"); },
                           {pe, "[128, 64]", "[64, 128]"});
}

TEST(Qwen3_5Moe, BadConfigFieldsAreErrorsNamingThem) {
  testing::TempDir tmp;
  int i = 0;
  const auto expect = [&](nlohmann::json patch, std::vector<std::string> needles) {
    testing::ExpectLoadError([&] { LoadMoe(tmp, {.config_patch = patch}, std::to_string(100 + i++)); }, needles);
  };
  expect({{"norm_topk_prob", false}}, {"norm_topk_prob", "renormalises"});
  expect({{"num_experts_per_tok", 5}}, {"num_experts_per_tok", "num_experts (4)"});
  expect({{"num_experts", 0}}, {"num_experts", "> 0"});
  expect({{"moe_intermediate_size", nullptr}}, {"moe_intermediate_size"});
  expect({{"shared_expert_intermediate_size", nullptr}}, {"shared_expert_intermediate_size"});
  expect({{"mlp_only_layers", nlohmann::json::array({1})}}, {"mlp_only_layers", "every Qwen3.5-MoE layer is sparse"});
  expect({{"decoder_sparse_step", 2}}, {"decoder_sparse_step", "must be 1"});
  // A config whose moe_intermediate_size disagrees with the stored experts: the tensor is named.
  expect({{"moe_intermediate_size", 64}}, {"model.layers.0.mlp.experts.gate_up_proj", "expected [4, 128, 64]"});
}

}  // namespace
}  // namespace vtllm::model
