// --kv-cache-dtype fp8 in the model layer: the fixture models (qwen3-tiny, the qwen3_5-tiny
// hybrid) run with an F8E4M3 cache close to the BF16-cache run; the per-layer scales of a
// checkpoint (every spelling vLLM's loader accepts) are used exactly: the first layer's cache
// bytes equal the BF16 run's keys and values quantized with them (x / scale, the reference
// of tests/vt/kv_fp8_ref.h), and a scale the loader dropped would change them; malformed
// scales are load errors naming the tensor; with `auto` the scales are ignored; the cache
// takes 1 byte per element.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>

#include "loader_test_util.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "model/safetensors_writer.h"
#include "model_oracle.h"
#include "vt/kv_fp8_ref.h"

namespace vtllm::model {
namespace {

const std::string kQwen3 = std::string(VTLLM_FIXTURES_DIR) + "/oracles/qwen3-tiny/bf16";
const std::string kHybrid = std::string(VTLLM_FIXTURES_DIR) + "/models/qwen3_5-tiny";

LoadOptions Options(const std::string& kv, vt::DType act = vt::DType::kBF16) {
  LoadOptions o = testing::CpuOptions(act);
  o.kv_cache_dtype = kv;
  return o;
}

// A copy of checkpoint `src` in `dst` with `extra` F32 tensors added (shape [] unless given).
struct Extra {
  float value;
  vt::Shape shape{};
};
void CopyWithScales(const std::string& src, const std::string& dst, const std::map<std::string, Extra>& extra) {
  for (const char* f : {"config.json", "generation_config.json"})
    if (std::filesystem::exists(src + "/" + f)) std::filesystem::copy_file(src + "/" + f, dst + "/" + f);
  const Checkpoint ckpt = Checkpoint::Open(src);
  SafetensorsWriter w;
  for (const std::string& name : ckpt.names()) w.Add(name, ckpt.Get(name));
  for (const auto& [name, e] : extra) {
    int64_t n = 1;
    for (int64_t d : e.shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n), e.value);
    w.Add(name, vt::DType::kF32, e.shape, v.data());
  }
  w.Write(dst + "/model.safetensors");
}

// Runs `prompt` in a fresh cache; returns the logits of every position and the cache.
struct PromptRun {
  std::vector<float> logits;
  std::vector<uint8_t> key0, value0;  // layer 0's cache bytes
  std::vector<int64_t> slots;         // the prompt's slots
  std::vector<std::pair<float, float>> kv_amax;  // per layer, max |key| and |value| (BF16 caches)
};
PromptRun RunPrompt(Model& m, const std::vector<int32_t>& prompt) {
  KvCache cache = m.MakeKvCache(static_cast<int64_t>(prompt.size()) + 8, 16);
  SequenceKv seq;
  std::vector<int64_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  PromptRun r;
  r.logits = m.Forward(prompt, pos, {&cache, &seq}, true);
  r.key0.resize(cache.key(0).nbytes());
  r.value0.resize(cache.value(0).nbytes());
  cache.key(0).CopyToHost(r.key0.data());
  cache.value(0).CopyToHost(r.value0.data());
  for (int64_t p = 0; p < static_cast<int64_t>(prompt.size()); ++p) r.slots.push_back(cache.SlotOf(seq, p));
  if (cache.key(0).dtype() == vt::DType::kBF16)
    for (int64_t l = 0; l < cache.spec().num_layers; ++l) {
      float km = 0, vm = 0;
      for (int64_t slot : r.slots)
        for (int64_t i = 0; i < cache.key(l).dim(2) * cache.key(l).dim(3); ++i) {
          const int64_t e = slot * cache.key(l).dim(2) * cache.key(l).dim(3) + i;
          km = std::max(km, std::fabs(vt::Bf16ToFloat(cache.key(l).data_as<uint16_t>()[e])));
          vm = std::max(vm, std::fabs(vt::Bf16ToFloat(cache.value(l).data_as<uint16_t>()[e])));
        }
      r.kv_amax.emplace_back(km, vm);
    }
  return r;
}

std::vector<int32_t> Prompt(int n, int salt, int vocab = 500) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 37 + salt * 11 + 5) % vocab);
  return p;
}

// max |logit| of a run, for the printed relative size of the FP8 cache's effect.
double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// The bound on |logit(FP8 cache) - logit(BF16 cache)| for these 3- and 4-layer random
// fixtures: e4m3 keeps 3 mantissa bits, so each cached key and value moves by up to 2^-4 of
// itself (BF16: 2^-9); measured 0.35 over qwen3-tiny's prompts (|logit| up to 3.7), 0.38
// with calibrated scales, 0.33 on qwen3_5-tiny. 0.6 leaves room for other prompts; a cache
// that saturates moves them by more than a unit (v_scale at half of amax / 448: 1.25).
constexpr double kLogitBound = 0.6;

// Layer 0's F8E4M3 bytes must be the BF16 run's layer-0 keys and values (the same inputs:
// nothing before layer 0's cache write depends on the cache) quantized with the scales.
void ExpectLayer0Quantized(const PromptRun& bf16, const PromptRun& fp8, int64_t width, float ks, float vs) {
  int bad = 0;
  for (int64_t slot : bf16.slots)
    for (int64_t i = 0; i < width && bad < 5; ++i) {
      const int64_t e = slot * width + i;
      uint16_t kb, vb;
      std::memcpy(&kb, &bf16.key0[2 * e], 2);
      std::memcpy(&vb, &bf16.value0[2 * e], 2);
      const uint8_t wk = vt_kvfp8::QuantRef(vt_test::DecodeBf16(kb), ks), wv = vt_kvfp8::QuantRef(vt_test::DecodeBf16(vb), vs);
      if (fp8.key0[e] != wk || fp8.value0[e] != wv)
        ADD_FAILURE() << "slot " << slot << " element " << i << ": key byte " << int(fp8.key0[e]) << " want "
                      << int(wk) << ", value byte " << int(fp8.value0[e]) << " want " << int(wv) << (++bad, "");
    }
}

TEST(KvCacheFp8Model, Qwen3TinyCloseToTheBf16Cache) {
  // kLogitBound; every layer-0 byte exactly the quantized BF16 key or value (scales 1).
  auto bf16 = Model::Load(kQwen3, Options("auto"));
  auto fp8 = Model::Load(kQwen3, Options("fp8"));
  EXPECT_EQ(bf16->kv_cache_dtype(), vt::DType::kBF16);
  EXPECT_EQ(fp8->kv_cache_dtype(), vt::DType::kF8E4M3);
  double worst = 0, largest = 0;
  bool any_diff = false;
  for (int salt = 0; salt < 4; ++salt) {
    const std::vector<int32_t> prompt = Prompt(8 + 29 * salt, salt);
    const PromptRun a = RunPrompt(*bf16, prompt), b = RunPrompt(*fp8, prompt);
    worst = std::max(worst, testing::MaxAbsDiff(a.logits, b.logits));
    largest = std::max(largest, MaxAbs(a.logits));
    any_diff = any_diff || a.logits != b.logits;
    ExpectLayer0Quantized(a, b, 2 * 32, 1.0f, 1.0f);
  }
  std::printf("qwen3-tiny fp8 KV cache: max |logit - bf16-cache logit| = %.4f (max |logit| %.2f)\n", worst,
              largest);
  EXPECT_LT(worst, kLogitBound);
  EXPECT_TRUE(any_diff) << "the fp8 cache changed nothing: was it used?";
}

TEST(KvCacheFp8Model, CheckpointScalesAreUsedInEverySpelling) {
  // Scales calibrated as ModelOpt does (amax / 448 of each layer's keys and values, here of
  // the test prompt in the BF16 run, times 1.1 so that nothing saturates), written under a
  // different spelling in each layer. Layer 0's bytes are checked exactly; the logits stay
  // within kLogitBound of the BF16 cache; the run with scale 1 gives other bytes (a loader
  // that dropped the scales fails the exact check).
  testing::TempDir dir;
  auto bf16 = Model::Load(kQwen3, Options("auto"));
  const std::vector<int32_t> prompt = Prompt(70, 3);
  const PromptRun a = RunPrompt(*bf16, prompt);
  ASSERT_EQ(a.kv_amax.size(), 3u);
  float ks[3], vs[3];
  for (int l = 0; l < 3; ++l) {
    ks[l] = a.kv_amax[l].first * 1.1f / 448.0f;
    vs[l] = a.kv_amax[l].second * 1.1f / 448.0f;
    std::printf("layer %d: k_scale %.5g, v_scale %.5g\n", l, ks[l], vs[l]);
  }
  const std::string p = "model.layers.";
  CopyWithScales(kQwen3, dir.path(),
                 {{p + "0.self_attn.k_scale", {ks[0]}},
                  {p + "0.self_attn.v_scale", {vs[0], {1}}},
                  {p + "1.self_attn.k_proj.k_scale", {ks[1]}},
                  {p + "1.self_attn.v_proj.v_scale", {vs[1]}},
                  {p + "2.self_attn.k_proj.output_scale", {ks[2], {1}}},
                  {p + "2.self_attn.v_proj.output_scale", {vs[2]}}});
  auto scaled = Model::Load(dir.path(), Options("fp8_e4m3"));
  auto unscaled = Model::Load(kQwen3, Options("fp8"));
  auto ignored = Model::Load(dir.path(), Options("auto"));  // auto: the scales are not read
  const PromptRun b = RunPrompt(*scaled, prompt), c = RunPrompt(*unscaled, prompt);
  ExpectLayer0Quantized(a, b, 2 * 32, ks[0], vs[0]);
  EXPECT_NE(b.key0, c.key0);
  EXPECT_NE(b.value0, c.value0);
  const double err = testing::MaxAbsDiff(a.logits, b.logits);
  std::printf("qwen3-tiny fp8 KV cache, calibrated scales: max |logit - bf16-cache logit| = %.4f\n", err);
  EXPECT_LT(err, kLogitBound);
  EXPECT_EQ(RunPrompt(*ignored, prompt).logits, a.logits);
}

TEST(KvCacheFp8Model, MalformedScalesAreLoadErrorsNamingTheTensor) {
  const std::string k0 = "model.layers.1.self_attn.k_scale";
  const std::vector<std::pair<std::map<std::string, Extra>, std::string>> cases = {
      {{{k0, {0.0f}}}, k0},
      {{{k0, {-0.5f}}}, k0},
      {{{k0, {NAN}}}, k0},
      {{{k0, {INFINITY}}}, k0},
      {{{k0, {0.1f, {2}}}}, k0},
      {{{"model.layers.2.self_attn.v_proj.output_scale", {0.0f}}}, "model.layers.2.self_attn.v_proj.output_scale"},
      {{{k0, {0.1f}}, {"model.layers.1.self_attn.k_proj.output_scale", {0.1f}}}, "k_proj.output_scale"},
  };
  for (const auto& [extra, name] : cases) {
    testing::TempDir dir;
    CopyWithScales(kQwen3, dir.path(), extra);
    try {
      Model::Load(dir.path(), Options("fp8"));
      ADD_FAILURE() << "no error for " << name;
    } catch (const vt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
    // With auto the cache is BF16 and the checkpoint's KV scales are not read.
    EXPECT_NO_THROW(Model::Load(dir.path(), Options("auto")));
  }
}

TEST(KvCacheFp8Model, BadFlagValueNamesTheFlag) {
  for (const char* v : {"fp16", "fp8_e5m2", "", "FP8"}) {
    try {
      Model::Load(kQwen3, Options(v));
      ADD_FAILURE() << "no error for " << v;
    } catch (const vt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--kv-cache-dtype"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + v + "\""), std::string::npos) << e.what();
    }
  }
}

TEST(KvCacheFp8Model, OneBytePerElement) {
  auto bf16 = Model::Load(kQwen3, Options("auto"));
  auto fp8 = Model::Load(kQwen3, Options("fp8"));
  auto f32 = Model::Load(kQwen3, Options("fp8", vt::DType::kF32));  // F32 activations, F8E4M3 cache
  EXPECT_EQ(fp8->KvCacheBytesPerBlock(16), 2 * 3 * 16 * 2 * 32);
  EXPECT_EQ(2 * fp8->KvCacheBytesPerBlock(16), bf16->KvCacheBytesPerBlock(16));
  EXPECT_EQ(f32->KvCacheBytesPerBlock(16), fp8->KvCacheBytesPerBlock(16));
  const KvCacheTensors t = fp8->MakeKvCacheTensors(4, 16);
  EXPECT_EQ(t.key(2).dtype(), vt::DType::kF8E4M3);
  EXPECT_EQ(t.value(0).nbytes(), static_cast<size_t>(4 * 16 * 2 * 32));
  EXPECT_EQ(bf16->MakeKvCacheTensors(4, 16).key(0).dtype(), vt::DType::kBF16);
}

TEST(KvCacheFp8Model, HybridFullAttentionLayersUseTheFp8Cache) {
  // qwen3_5-tiny: Gated DeltaNet layers (their state stays in the model dtype) and gated
  // full-attention layers whose cache is F8E4M3; kLogitBound as for the decoder.
  auto bf16 = Model::Load(kHybrid, Options("auto"));
  auto fp8 = Model::Load(kHybrid, Options("fp8"));
  EXPECT_EQ(fp8->MakeKvCacheTensors(2, 16, 1).key(0).dtype(), vt::DType::kF8E4M3);
  EXPECT_EQ(2 * fp8->KvCacheBytesPerBlock(16), bf16->KvCacheBytesPerBlock(16));
  double worst = 0;
  for (int salt = 0; salt < 3; ++salt) {
    const std::vector<int32_t> prompt = Prompt(10 + 30 * salt, salt, static_cast<int>(bf16->vocab_size()));
    KvCache ca = bf16->MakeKvCache(128, 16, 1), cb = fp8->MakeKvCache(128, 16, 1);
    SequenceKv sa, sb;
    std::vector<int64_t> pos(prompt.size());
    std::iota(pos.begin(), pos.end(), 0);
    const std::vector<float> la = bf16->Forward(prompt, pos, {&ca, &sa}, true);
    const std::vector<float> lb = fp8->Forward(prompt, pos, {&cb, &sb}, true);
    worst = std::max(worst, testing::MaxAbsDiff(la, lb));
    EXPECT_NE(la, lb);
  }
  std::printf("qwen3_5-tiny fp8 KV cache: max |logit - bf16-cache logit| = %.4f\n", worst);
  EXPECT_LT(worst, kLogitBound);
}

}  // namespace
}  // namespace vtllm::model
