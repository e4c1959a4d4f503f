// make_random_checkpoint: writes a Hugging Face style checkpoint with random weights and
// real shapes (config.json, generation_config.json, model.safetensors), in BF16, static
// per-tensor FP8 W8A8 in the ModelOpt or compressed-tensors spelling, or block FP8 with
// dynamic activations (the official Qwen3-*-FP8 layout: 128 x 128 weight blocks, each with
// its weight_scale_inv; dense, MoE and hybrid presets, whose experts are block FP8 too and
// whose routers stay BF16, as in Qwen3-30B-A3B-FP8 and Qwen3-Next-80B-A3B-Instruct-FP8). For
// benchmarks and loader tests; the weights mean nothing.
//
//   make_random_checkpoint --out DIR --preset NAME (below)
//       [--format bf16|fp8-modelopt|fp8-compressed-tensors|fp8-block] [--layers N] [--seed S] [--threads T]
//       [--config-only]
//
// Presets: qwen3-0.6b, qwen3-8b, qwen3-tiny, qwen3-tiny-vocab (dense Qwen3); qwen3-30b-a3b,
// qwen3-moe-tiny (Qwen3MoeForCausalLM); qwen3-next-80b-a3b, qwen3-next-tiny
// (Qwen3NextForCausalLM); qwen3.5-35b-a3b, qwen3.5-moe-tiny (Qwen3_5MoeForCausalLM).
//
// The MoE presets write Qwen3MoeForCausalLM (qwen3-30b-a3b: Qwen3-30B-A3B's shape, 128
// experts of which 8 per token; --layers takes fewer of the same layers where memory is
// short). Their routers (mlp.gate, [E, H], kept BF16 and excluded from the FP8
// quantization) are N(0, 1/sqrt(H)), so router logits spread like a trained router's
// rather than tying; the experts' input scales differ a little per expert, so that the
// loader's max over experts matters.
//
// The hybrid presets: Gated DeltaNet layers beside gated full attention every 4th layer,
// every layer sparse with a sigmoid-gated shared expert; conv1d, A_log, dt_bias, the norms,
// the routers and the shared-expert gates stay BF16 in every format.
// - qwen3-next-80b-a3b (Qwen3-Next-80B-A3B's shape, 512 experts, 10 per token): the flat
//   config, weights under model.*, the fused in_proj_qkvz / in_proj_ba (rows interleaved per
//   key-head group).
// - qwen3.5-35b-a3b (Qwen3.5-35B-A3B's shape, 256 experts, 8 per token): the text config
//   nested under text_config with explicit layer_types, weights under model.language_model.*,
//   the split in_proj_qkv / in_proj_z / in_proj_b / in_proj_a; in BF16 the experts fused as
//   the BF16 release stores them (experts.gate_up_proj [E, 2I, H], experts.down_proj
//   [E, H, I]), in the FP8 formats one tensor per expert and projection (as the block-FP8
//   release stores them). The architecture is Qwen3_5MoeForCausalLM: the releases'
//   Qwen3_5MoeForConditionalGeneration also has a vision tower and an MTP head, not written.
// - qwen3-next-tiny, qwen3.5-moe-tiny: the same layouts with widths that cross 128-row blocks
//   off their boundaries (hidden 192, in_proj_qkvz groups of 256 rows whose q, k, v, z start
//   inside blocks, expert intermediate 160), for tests of the block-FP8 loader.
// In fp8-block the hybrids keep in BF16 what the FP8 releases list in modules_to_not_convert:
// lm_head, and per layer the norms, linear_attn.{A_log, conv1d, dt_bias, norm} with
// in_proj_ba (Qwen3-Next) or in_proj_a and in_proj_b (Qwen3.5), mlp.gate and
// mlp.shared_expert_gate; every other linear (in_proj_qkvz or in_proj_qkv and in_proj_z,
// out_proj, q/k/v/o_proj, the shared expert's and the routed experts' projections) is block
// FP8 (scales written F32). The static formats quantize every linear but lm_head, the routers
// and the gates. --layers N keeps the first N layers (their 3:1 pattern).
//
// Weights are N(0, 0.02) (an Irwin-Hall approximation: fast, and plenty for random
// weights), norm weights 1 + N(0, 0.02) (the hybrids' zero-centred norms N(0, 0.02)). FP8
// weights are quantized per tensor with weight_scale = amax / 448 the way the quantizers do
// it (x * (1/scale), clamp, RNE); input_scale is a constant that fits the activations such a
// model produces. Every tensor has its own random stream (from the seed and its name),
// generated in fixed-size chunks spread over threads, so the output does not depend on the
// thread count. --config-only writes config.json and generation_config.json alone.
#include <CLI/CLI.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/safetensors_writer.h"
#include "vt/detail/numerics.h"
#include "vt/dtype.h"
#include "vt/error.h"

namespace {

using nlohmann::json;
using vtllm::model::SafetensorsWriter;

struct Moe {
  int64_t experts = 0, top_k = 0, intermediate = 0;
  bool norm_topk_prob = true;
  int64_t sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
};

// Gated DeltaNet layers (linear attention) beside gated full attention.
struct Hybrid {
  int64_t key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0, conv = 0;
  int64_t full_attention_interval = 0;  // layer i is full attention iff (i + 1) % this == 0
  int64_t shared_intermediate = 0;      // the sigmoid-gated shared expert
  double partial_rotary = 1.0;
  bool qwen3_5 = false;  // Qwen3.5's layout (above), else Qwen3-Next's
};

struct Preset {
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim, vocab, max_pos;
  bool tie;
  json bos, eos;
  Moe moe = {};  // experts == 0: a dense Qwen3
  Hybrid hybrid = {};  // key_heads == 0: no Gated DeltaNet layers
  double rope_theta = 1000000.0;

  bool is_hybrid() const { return hybrid.key_heads > 0; }
  bool qwen3_5() const { return is_hybrid() && hybrid.qwen3_5; }
  bool linear_attention(int64_t l) const { return is_hybrid() && (l + 1) % hybrid.full_attention_interval != 0; }
  // Where the decoder's weights live: the multimodal wrapper's text model, or the model.
  std::string root() const { return qwen3_5() ? "model.language_model." : "model."; }

  bool sparse(int64_t l) const {
    if (moe.experts == 0) return false;
    for (int64_t d : moe.mlp_only_layers)
      if (d == l) return false;
    return (l + 1) % moe.sparse_step == 0;
  }
};

constexpr const char* kPresetNames[] = {"qwen3-0.6b",         "qwen3-8b",        "qwen3-tiny",
                                        "qwen3-tiny-vocab",   "qwen3-30b-a3b",   "qwen3-moe-tiny",
                                        "qwen3-next-80b-a3b", "qwen3-next-tiny", "qwen3.5-35b-a3b",
                                        "qwen3.5-moe-tiny"};

Preset GetPreset(const std::string& name) {
  if (name == "qwen3-0.6b") return {1024, 3072, 28, 16, 8, 128, 151936, 40960, true, 151643, 151645};
  if (name == "qwen3-8b") return {4096, 12288, 36, 32, 8, 128, 151936, 40960, false, 151643, 151645};
  if (name == "qwen3-tiny") return {128, 384, 3, 4, 2, 32, 512, 1024, false, nullptr, nullptr};
  // Tiny layers over Qwen3's whole vocabulary: for tests that pair a random model with the
  // real Qwen3 tokenizer (ids up to 151668 must exist).
  if (name == "qwen3-tiny-vocab") return {64, 128, 2, 2, 1, 32, 151936, 4096, true, 151643, 151645};
  if (name == "qwen3-30b-a3b")
    return {2048, 6144, 48, 32, 4, 128, 151936, 40960, false, 151643, 151645, {128, 8, 768, true, 1, {}}};
  // Qwen3-Next-80B-A3B's shape (512 experts, 10 per token, a gated shared expert, three Gated
  // DeltaNet layers to each full-attention one); --layers 4 keeps one of each kind's period.
  if (name == "qwen3-next-80b-a3b")
    return {2048, 5120, 48, 16, 2, 256, 151936, 262144, false, 151643, 151645, {512, 10, 512, true, 1, {}},
            {16, 32, 128, 128, 4, 4, 512, 0.25, false}, 10000000.0};
  // Qwen3.5-35B-A3B's text model (256 experts, 8 per token, a gated shared expert of 512, the
  // same 3:1 layer pattern over 40 layers, a 248320-token vocabulary; no dense MLP).
  if (name == "qwen3.5-35b-a3b")
    return {2048, 0, 40, 16, 2, 256, 248320, 262144, false, nullptr, 248046, {256, 8, 512, true, 1, {}},
            {16, 32, 128, 128, 4, 4, 512, 0.25, true}, 10000000.0};
  // Tiny hybrids whose projections cross 128-row blocks off their boundaries (see above).
  if (name == "qwen3-next-tiny" || name == "qwen3.5-moe-tiny")
    return {192, 256, 4, 2, 1, 64, 512, 4096, false, nullptr, nullptr, {8, 2, 160, true, 1, {}},
            {2, 4, 48, 40, 4, 4, 192, 0.25, name == "qwen3.5-moe-tiny"}, 10000000.0};
  // Four layers, the first dense (mlp_only_layers), eight experts of which two per token.
  if (name == "qwen3-moe-tiny") return {64, 96, 4, 4, 2, 16, 256, 1024, false, nullptr, nullptr, {8, 2, 32, true, 1, {0}}};
  std::string known;
  for (const char* n : kPresetNames) known += (known.empty() ? "" : ", ") + std::string(n);
  throw vt::Error("make_random_checkpoint: unknown preset '" + name + "' (" + known + ")");
}

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t HashName(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return SplitMix(h);
}

constexpr int64_t kChunk = 1 << 20;  // elements per independent random stream

// Calls fn(begin, end, chunk_seed) for each chunk of [0, n), spread over `threads`.
template <typename Fn>
void ForChunks(int64_t n, uint64_t seed, int threads, Fn fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t c; (c = next.fetch_add(1)) < chunks;) {
      uint64_t s = seed + static_cast<uint64_t>(c) * 0xD1B54A32D192ED03ull;
      fn(c * kChunk, std::min(n, (c + 1) * kChunk), SplitMix(s));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int64_t>(threads, chunks); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

// mean + std * N(0,1), N(0,1) approximated by the sum of four 16-bit uniforms (Irwin-Hall).
void FillNormal(float* out, int64_t begin, int64_t end, uint64_t state, float mean, float std) {
  constexpr float kCenter = 4 * 32767.5f;
  const float k = std / 37837.23f;  // sqrt(4 * (65536^2 - 1) / 12)
  for (int64_t i = begin; i < end; ++i) {
    const uint64_t r = SplitMix(state);
    const float sum = static_cast<float>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
    out[i - begin] = mean + (sum - kCenter) * k;
  }
}

struct Generator {
  uint64_t seed;
  int threads;
  bool fp8;
  bool scales_1d;  // compressed-tensors stores scales as [1], ModelOpt as []
  bool block;      // block FP8: weight_scale_inv per kBlock x kBlock block, no input scale
  SafetensorsWriter* writer;

  static constexpr int64_t kBlock = 128;

  void Bf16(const std::string& name, const vt::Shape& shape, float mean, float std) const {
    const uint64_t s = HashName(seed, name);
    const int th = threads;
    writer->AddGenerated(name, vt::DType::kBF16, shape, [=](void* dst, size_t nbytes) {
      auto* out = static_cast<uint16_t*>(dst);
      ForChunks(static_cast<int64_t>(nbytes / 2), s, th, [&](int64_t b, int64_t e, uint64_t cs) {
        std::vector<float> tmp(static_cast<size_t>(e - b));
        FillNormal(tmp.data(), b, e, cs, mean, std);
        for (int64_t i = b; i < e; ++i) out[i] = vt::FloatToBf16(tmp[static_cast<size_t>(i - b)]);
      });
    });
  }

  // A linear layer's weight [n, k] (and its scales when FP8 and `quantize`).
  void Linear(const std::string& prefix, int64_t n, int64_t k, float input_scale, bool quantize = true) const {
    if (!fp8 || !quantize) return Bf16(prefix + ".weight", {n, k}, 0.0f, 0.02f);
    if (block) return BlockLinear(prefix, n, k);
    const uint64_t s = HashName(seed, prefix + ".weight");
    const int64_t numel = n * k;
    // Two passes over the same random streams: amax now (for the scale, which the writer
    // needs before the weight), the values again when the weight is written. Regenerating
    // is cheaper than keeping every FP8 layer's floats in memory.
    std::mutex mu;
    float amax = 0.0f;
    ForChunks(numel, s, threads, [&](int64_t b, int64_t e, uint64_t cs) {
      std::vector<float> tmp(static_cast<size_t>(e - b));
      FillNormal(tmp.data(), b, e, cs, 0.0f, 0.02f);
      float m = 0.0f;
      for (float v : tmp) m = std::max(m, std::fabs(v));
      std::lock_guard<std::mutex> lock(mu);
      amax = std::max(amax, m);
    });
    const float weight_scale = amax / vt::kFp8E4M3Max;
    const int th = threads;
    writer->AddGenerated(prefix + ".weight", vt::DType::kF8E4M3, {n, k}, [=](void* dst, size_t nbytes) {
      auto* out = static_cast<uint8_t*>(dst);
      const float inv = 1.0f / weight_scale;
      ForChunks(static_cast<int64_t>(nbytes), s, th, [&](int64_t b, int64_t e, uint64_t cs) {
        std::vector<float> tmp(static_cast<size_t>(e - b));
        FillNormal(tmp.data(), b, e, cs, 0.0f, 0.02f);
        for (int64_t i = b; i < e; ++i) out[i] = vt::numerics::QuantizeFp8(tmp[static_cast<size_t>(i - b)], inv);
      });
    });
    const vt::Shape scalar = scales_1d ? vt::Shape{1} : vt::Shape{};
    writer->Add(prefix + ".weight_scale", vt::DType::kF32, scalar, &weight_scale);
    writer->Add(prefix + ".input_scale", vt::DType::kF32, scalar, &input_scale);
  }

  // A block-FP8 linear: weight_scale_inv[i, j] = amax of block (i, j) / 448, each code the
  // element divided by its block's scale, RNE (as the block quantizers that publish these
  // checkpoints do). The same two passes over the random streams as Linear.
  void BlockLinear(const std::string& prefix, int64_t n, int64_t k) const {
    const uint64_t s = HashName(seed, prefix + ".weight");
    const int64_t nb = (n + kBlock - 1) / kBlock, kb = (k + kBlock - 1) / kBlock;
    std::mutex mu;
    std::vector<float> amax(static_cast<size_t>(nb * kb), 0.0f);
    ForChunks(n * k, s, threads, [&](int64_t b, int64_t e, uint64_t cs) {
      std::vector<float> tmp(static_cast<size_t>(e - b)), local(amax.size(), 0.0f);
      FillNormal(tmp.data(), b, e, cs, 0.0f, 0.02f);
      for (int64_t i = b; i < e; ++i) {
        float& m = local[static_cast<size_t>((i / k) / kBlock * kb + (i % k) / kBlock)];
        m = std::max(m, std::fabs(tmp[static_cast<size_t>(i - b)]));
      }
      std::lock_guard<std::mutex> lock(mu);
      for (size_t j = 0; j < amax.size(); ++j) amax[j] = std::max(amax[j], local[j]);
    });
    std::vector<float> scale_inv(amax.size());
    for (size_t j = 0; j < amax.size(); ++j) scale_inv[j] = std::max(amax[j], 1e-12f) / vt::kFp8E4M3Max;
    const int th = threads;
    writer->AddGenerated(prefix + ".weight", vt::DType::kF8E4M3, {n, k}, [=](void* dst, size_t nbytes) {
      auto* out = static_cast<uint8_t*>(dst);
      ForChunks(static_cast<int64_t>(nbytes), s, th, [&](int64_t b, int64_t e, uint64_t cs) {
        std::vector<float> tmp(static_cast<size_t>(e - b));
        FillNormal(tmp.data(), b, e, cs, 0.0f, 0.02f);
        for (int64_t i = b; i < e; ++i) {
          const float sc = scale_inv[static_cast<size_t>((i / k) / kBlock * kb + (i % k) / kBlock)];
          out[i] = vt::numerics::QuantizeFp8(tmp[static_cast<size_t>(i - b)] / sc, 1.0f);
        }
      });
    });
    writer->Add(prefix + ".weight_scale_inv", vt::DType::kF32, {nb, kb}, scale_inv.data());
  }
};

// ModelOpt's exclusions: lm_head, and the MoE routers.
json Excluded(const Preset& p) {
  if (p.is_hybrid()) return json{"lm_head", "*.mlp.gate", "*.mlp.shared_expert_gate"};
  return p.moe.experts > 0 ? json{"lm_head", "*.mlp.gate"} : json{"lm_head"};
}

// Block FP8's modules_to_not_convert. The hybrids' follow Qwen3-Next-80B-A3B-Instruct-FP8's
// (and the Qwen3.5 FP8 releases', with in_proj_a and in_proj_b for in_proj_ba): lm_head, then
// per layer what stays BF16 (transformers matches an entry anywhere in a module's name).
json BlockNotConverted(const Preset& p) {
  json out = {"lm_head"};
  if (!p.is_hybrid()) return out;
  for (int64_t l = 0; l < p.layers; ++l) {
    const std::string pre = p.root() + "layers." + std::to_string(l) + ".";
    std::vector<std::string> kept = {"input_layernorm", "mlp.gate", "mlp.shared_expert_gate", "post_attention_layernorm"};
    if (p.linear_attention(l)) {
      for (const char* m : {"A_log", "conv1d", "dt_bias", "norm"}) kept.push_back(std::string("linear_attn.") + m);
      if (p.qwen3_5()) {
        kept.push_back("linear_attn.in_proj_a");
        kept.push_back("linear_attn.in_proj_b");
      } else {
        kept.push_back("linear_attn.in_proj_ba");
      }
    } else {
      kept.push_back("self_attn.k_norm");
      kept.push_back("self_attn.q_norm");
    }
    std::sort(kept.begin(), kept.end());
    for (const std::string& k : kept) out.push_back(pre + k);
  }
  return out;
}

json QuantizationConfig(const Preset& p, const std::string& format) {
  if (format == "fp8-modelopt") return {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}, {"exclude_modules", Excluded(p)}};
  if (format == "fp8-block")
    return {{"quant_method", "fp8"},
            {"activation_scheme", "dynamic"},
            {"fmt", "e4m3"},
            {"weight_block_size", {Generator::kBlock, Generator::kBlock}},
            {"modules_to_not_convert", BlockNotConverted(p)}};
  if (format != "fp8-compressed-tensors") return nullptr;
  const json args = {{"type", "float"},      {"num_bits", 8},          {"strategy", "tensor"},
                     {"dynamic", false},     {"symmetric", true},      {"group_size", nullptr},
                     {"block_structure", nullptr}, {"actorder", nullptr}, {"observer", "minmax"},
                     {"observer_kwargs", json::object()}};
  return {
      {"quant_method", "compressed-tensors"},
      {"format", "float-quantized"},
      {"quantization_status", "compressed"},
      {"global_compression_ratio", nullptr},
      {"kv_cache_scheme", nullptr},
      {"sparsity_config", json::object()},
      {"ignore", p.is_hybrid()         ? json{"lm_head", "re:.*mlp\\.gate$", "re:.*shared_expert_gate$"}
                 : p.moe.experts > 0 ? json{"lm_head", "re:.*mlp\\.gate$"}
                                     : json{"lm_head"}},
      {"config_groups",
       {{"group_0",
         {{"targets", {"Linear"}}, {"weights", args}, {"input_activations", args}, {"output_activations", nullptr},
          {"format", "float-quantized"}}}}},
  };
}

// Qwen3.5-MoE's config: the multimodal wrapper's fields, the text model's under text_config
// (HF's Qwen3_5MoeTextConfig: explicit layer_types, no dense intermediate_size; the rope
// parameters carry the multimodal rotary sections, which text-only positions make plain rope).
json Qwen35Config(const Preset& p, const std::string& format) {
  const Hybrid& h = p.hybrid;
  json layer_types = json::array();
  for (int64_t i = 0; i < p.layers; ++i) layer_types.push_back(p.linear_attention(i) ? "linear_attention" : "full_attention");
  const json text = {
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"attn_output_gate", true},
      {"bos_token_id", p.bos},
      {"dtype", "bfloat16"},
      {"eos_token_id", p.eos},
      {"full_attention_interval", h.full_attention_interval},
      {"head_dim", p.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden},
      {"initializer_range", 0.02},
      {"layer_types", layer_types},
      {"linear_conv_kernel_dim", h.conv},
      {"linear_key_head_dim", h.key_dim},
      {"linear_num_key_heads", h.key_heads},
      {"linear_num_value_heads", h.value_heads},
      {"linear_value_head_dim", h.value_dim},
      {"mamba_ssm_dtype", "float32"},
      {"max_position_embeddings", p.max_pos},
      {"model_type", "qwen3_5_moe_text"},
      {"moe_intermediate_size", p.moe.intermediate},
      {"num_attention_heads", p.heads},
      {"num_experts", p.moe.experts},
      {"num_experts_per_tok", p.moe.top_k},
      {"num_hidden_layers", p.layers},
      {"num_key_value_heads", p.kv_heads},
      {"output_router_logits", false},
      {"partial_rotary_factor", h.partial_rotary},
      {"rms_norm_eps", 1e-6},
      {"rope_parameters",
       {{"mrope_interleaved", true},
        {"mrope_section", {11, 11, 10}},
        {"partial_rotary_factor", h.partial_rotary},
        {"rope_theta", p.rope_theta},
        {"rope_type", "default"}}},
      {"router_aux_loss_coef", 0.001},
      {"shared_expert_intermediate_size", h.shared_intermediate},
      {"tie_word_embeddings", p.tie},
      {"use_cache", true},
      {"vocab_size", p.vocab},
  };
  json c = {{"architectures", {"Qwen3_5MoeForCausalLM"}},
            {"model_type", "qwen3_5_moe"},
            {"text_config", text},
            {"tie_word_embeddings", p.tie},
            {"transformers_version", "5.17.0"}};
  if (json q = QuantizationConfig(p, format); !q.is_null()) c["quantization_config"] = q;
  return c;
}

json MakeConfig(const Preset& p, const std::string& format) {
  if (p.qwen3_5()) return Qwen35Config(p, format);
  json layer_types = json::array();
  for (int64_t i = 0; i < p.layers; ++i) layer_types.push_back("full_attention");
  json c = {
      {"architectures",
       {p.is_hybrid() ? "Qwen3NextForCausalLM" : p.moe.experts > 0 ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"bos_token_id", p.bos},
      {"dtype", "bfloat16"},
      {"eos_token_id", p.eos},
      {"head_dim", p.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate},
      {"layer_types", layer_types},
      {"max_position_embeddings", p.max_pos},
      {"max_window_layers", p.layers},
      {"model_type", p.is_hybrid() ? "qwen3_next" : p.moe.experts > 0 ? "qwen3_moe" : "qwen3"},
      {"num_attention_heads", p.heads},
      {"num_hidden_layers", p.layers},
      {"num_key_value_heads", p.kv_heads},
      {"rms_norm_eps", 1e-6},
      {"rope_parameters", {{"rope_theta", p.rope_theta}, {"rope_type", "default"}}},
      {"sliding_window", nullptr},
      {"tie_word_embeddings", p.tie},
      {"transformers_version", "5.17.0"},
      {"use_cache", true},
      {"use_sliding_window", false},
      {"vocab_size", p.vocab},
  };
  if (p.moe.experts > 0) {
    c["num_experts"] = p.moe.experts;
    c["num_experts_per_tok"] = p.moe.top_k;
    c["moe_intermediate_size"] = p.moe.intermediate;
    c["norm_topk_prob"] = p.moe.norm_topk_prob;
    c["decoder_sparse_step"] = p.moe.sparse_step;
    c["mlp_only_layers"] = p.moe.mlp_only_layers;
    c["output_router_logits"] = false;
    c["router_aux_loss_coef"] = 0.001;
  }
  if (p.is_hybrid()) {  // Qwen3-Next's flat config spells the layer kinds by their interval
    c.erase("layer_types");
    c["full_attention_interval"] = p.hybrid.full_attention_interval;
    c["linear_num_key_heads"] = p.hybrid.key_heads;
    c["linear_num_value_heads"] = p.hybrid.value_heads;
    c["linear_key_head_dim"] = p.hybrid.key_dim;
    c["linear_value_head_dim"] = p.hybrid.value_dim;
    c["linear_conv_kernel_dim"] = p.hybrid.conv;
    c["shared_expert_intermediate_size"] = p.hybrid.shared_intermediate;
    c["partial_rotary_factor"] = p.hybrid.partial_rotary;
    c["rope_parameters"]["partial_rotary_factor"] = p.hybrid.partial_rotary;
  }
  if (json q = QuantizationConfig(p, format); !q.is_null()) c["quantization_config"] = q;
  return c;
}

// Inputs of q/k/v and gate/up are RMS-normed (|x| up to ~9 at scale 0.02); the inputs of
// o_proj, out_proj and down_proj are smaller.
constexpr float kNormedInputScale = 0.02f, kInnerInputScale = 0.01f;

// A Gated DeltaNet layer's token mixer under `la` ("...linear_attn."): Qwen3-Next's fused
// projections (rows per key-head group [q | k | v | z] and [b | a]; the generator's rows are
// random, so only the shapes matter) or Qwen3.5's split ones. Block FP8 keeps b and a BF16.
void WriteGatedDeltaNet(const Generator& g, const Preset& p, const std::string& la) {
  const Hybrid& h = p.hybrid;
  const int64_t ck = h.key_heads * h.key_dim, cv = h.value_heads * h.value_dim, qkv = 2 * ck + cv;
  if (p.qwen3_5()) {
    g.Linear(la + "in_proj_qkv", qkv, p.hidden, kNormedInputScale);
    g.Linear(la + "in_proj_z", cv, p.hidden, kNormedInputScale);
    g.Linear(la + "in_proj_b", h.value_heads, p.hidden, kNormedInputScale, !g.block);
    g.Linear(la + "in_proj_a", h.value_heads, p.hidden, kNormedInputScale, !g.block);
  } else {
    g.Linear(la + "in_proj_qkvz", qkv + cv, p.hidden, kNormedInputScale);
    g.Linear(la + "in_proj_ba", 2 * h.value_heads, p.hidden, kNormedInputScale, !g.block);
  }
  g.Bf16(la + "conv1d.weight", {qkv, 1, h.conv}, 0.0f, 0.5f);
  g.Bf16(la + "A_log", {h.value_heads}, 0.0f, 0.5f);
  g.Bf16(la + "dt_bias", {h.value_heads}, 0.0f, 0.5f);
  g.Bf16(la + "norm.weight", {h.value_dim}, 1.0f, 0.02f);
  g.Linear(la + "out_proj", p.hidden, cv, kInnerInputScale);
}

// A sparse layer's MLP under `m` ("...mlp."): the router, the experts (one tensor per expert
// and projection; Qwen3.5's BF16 fused as its release stores them) and the shared expert.
void WriteSparseMlp(const Generator& g, const Preset& p, const std::string& m) {
  const int64_t E = p.moe.experts, mi = p.moe.intermediate;
  g.Bf16(m + "gate.weight", {E, p.hidden}, 0.0f, 1.0f / std::sqrt(static_cast<float>(p.hidden)));
  if (p.qwen3_5() && !g.fp8) {
    g.Bf16(m + "experts.gate_up_proj", {E, 2 * mi, p.hidden}, 0.0f, 0.02f);
    g.Bf16(m + "experts.down_proj", {E, p.hidden, mi}, 0.0f, 0.02f);
  } else {
    for (int64_t e = 0; e < E; ++e) {
      const std::string ex = m + "experts." + std::to_string(e) + ".";
      const float wiggle = 1.0f + 0.05f * static_cast<float>(e % 4);
      g.Linear(ex + "gate_proj", mi, p.hidden, kNormedInputScale * wiggle);
      g.Linear(ex + "up_proj", mi, p.hidden, kNormedInputScale * wiggle);
      g.Linear(ex + "down_proj", p.hidden, mi, kInnerInputScale * wiggle);
    }
  }
  if (p.hybrid.shared_intermediate > 0) {
    const int64_t si = p.hybrid.shared_intermediate;
    g.Linear(m + "shared_expert.gate_proj", si, p.hidden, kNormedInputScale);
    g.Linear(m + "shared_expert.up_proj", si, p.hidden, kNormedInputScale);
    g.Linear(m + "shared_expert.down_proj", p.hidden, si, kInnerInputScale);
    g.Bf16(m + "shared_expert_gate.weight", {1, p.hidden}, 0.0f, 0.02f);
  }
}

void WriteLayer(const Generator& g, const Preset& p, int64_t l) {
  const std::string pre = p.root() + "layers." + std::to_string(l) + ".";
  // The hybrids' norms are zero-centred (x_hat * (1 + w)); their q_proj also gives the gate.
  const float norm_mean = p.is_hybrid() ? 0.0f : 1.0f;
  g.Bf16(pre + "input_layernorm.weight", {p.hidden}, norm_mean, 0.02f);
  g.Bf16(pre + "post_attention_layernorm.weight", {p.hidden}, norm_mean, 0.02f);
  if (p.linear_attention(l)) {
    WriteGatedDeltaNet(g, p, pre + "linear_attn.");
  } else {
    const int64_t q_dim = p.heads * p.head_dim, kv_dim = p.kv_heads * p.head_dim;
    g.Bf16(pre + "self_attn.q_norm.weight", {p.head_dim}, norm_mean, 0.02f);
    g.Bf16(pre + "self_attn.k_norm.weight", {p.head_dim}, norm_mean, 0.02f);
    g.Linear(pre + "self_attn.q_proj", (p.is_hybrid() ? 2 : 1) * q_dim, p.hidden, kNormedInputScale);
    g.Linear(pre + "self_attn.k_proj", kv_dim, p.hidden, kNormedInputScale);
    g.Linear(pre + "self_attn.v_proj", kv_dim, p.hidden, kNormedInputScale);
    g.Linear(pre + "self_attn.o_proj", p.hidden, q_dim, kInnerInputScale);
  }
  if (p.sparse(l)) return WriteSparseMlp(g, p, pre + "mlp.");
  g.Linear(pre + "mlp.gate_proj", p.intermediate, p.hidden, kNormedInputScale);
  g.Linear(pre + "mlp.up_proj", p.intermediate, p.hidden, kNormedInputScale);
  g.Linear(pre + "mlp.down_proj", p.hidden, p.intermediate, kInnerInputScale);
}

void WriteJson(const std::string& path, const json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw vt::Error("make_random_checkpoint: cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a random-weight Hugging Face checkpoint (BF16, static FP8 W8A8 or block FP8)"};
  std::string out_dir, preset_name, format = "bf16";
  int64_t layers = -1;
  uint64_t seed = 0;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--out", out_dir, "output directory (created if absent)")->required();
  std::string preset_list;
  for (const char* n : kPresetNames) preset_list += (preset_list.empty() ? "" : ", ") + std::string(n);
  app.add_option("--preset", preset_name, preset_list)
      ->required()
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kPresetNames), std::end(kPresetNames))));
  app.add_option("--format", format, "bf16, fp8-modelopt, fp8-compressed-tensors or fp8-block")
      ->check(CLI::IsMember({"bf16", "fp8-modelopt", "fp8-compressed-tensors", "fp8-block"}));
  app.add_option("--layers", layers, "number of decoder layers (default: the preset's)")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "random seed");
  app.add_option("--threads", threads, "threads generating weights")->check(CLI::PositiveNumber);
  bool config_only = false;
  app.add_flag("--config-only", config_only, "write config.json and generation_config.json, no weights");
  CLI11_PARSE(app, argc, argv);

  try {
    const auto t0 = std::chrono::steady_clock::now();
    Preset p = GetPreset(preset_name);
    if (layers > 0) p.layers = layers;
    std::erase_if(p.moe.mlp_only_layers, [&](int64_t l) { return l >= p.layers; });
    ::mkdir(out_dir.c_str(), 0755);
    struct stat st;
    if (::stat(out_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw vt::Error("make_random_checkpoint: cannot create directory " + out_dir);

    const bool fp8 = format != "bf16";
    SafetensorsWriter w;
    w.SetMetadata("format", "pt");
    const Generator g{seed, threads, fp8, format == "fp8-compressed-tensors", format == "fp8-block", &w};
    if (!config_only) {
      const std::string root = p.root();
      g.Bf16(root + "embed_tokens.weight", {p.vocab, p.hidden}, 0.0f, 0.02f);
      for (int64_t l = 0; l < p.layers; ++l) WriteLayer(g, p, l);
      g.Bf16(root + "norm.weight", {p.hidden}, p.is_hybrid() ? 0.0f : 1.0f, 0.02f);
      if (!p.tie) g.Bf16("lm_head.weight", {p.vocab, p.hidden}, 0.0f, 0.02f);
    }

    const std::string dir = out_dir + "/";
    WriteJson(dir + "config.json", MakeConfig(p, format));
    json gen = {{"_from_model_config", true}, {"transformers_version", "5.17.0"}};
    if (!p.bos.is_null()) gen["bos_token_id"] = p.bos;
    if (!p.eos.is_null()) gen["eos_token_id"] = p.eos;
    WriteJson(dir + "generation_config.json", gen);
    if (format == "fp8-modelopt")
      WriteJson(dir + "hf_quant_config.json",
                {{"producer", {{"name", "modelopt"}, {"version", "0.0.0"}}},
                 {"quantization", {{"quant_algo", "FP8"}, {"kv_cache_quant_algo", nullptr}, {"exclude_modules", Excluded(p)}}}});
    if (!config_only) w.Write(dir + "model.safetensors");
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "wrote %s: %zu tensors, %.1f MB (%s, %lld layers) in %.2f s\n", out_dir.c_str(), w.size(),
                 static_cast<double>(w.data_bytes()) / 1e6, format.c_str(), static_cast<long long>(p.layers), secs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
