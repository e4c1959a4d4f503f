#include "model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "model/checkpoint.h"
#include "model/load_error.h"
#include "model/model.h"
#include "model/progress.h"
#include "model/safetensors_writer.h"
#include "vt/error.h"
#include "vt/ops/quant.h"

namespace vtllm::model {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr float kE4m3Max = 448.0f;

// amax / 448, or 1 where amax is 0 (any scale quantizes zeros to zeros).
float ScaleOf(float amax) {
  const float s = amax / kE4m3Max;
  return s > 0.0f ? s : 1.0f;
}

// Max |v| over a float tensor's elements; sets *finite to false if any is NaN or Inf.
float AbsMax(const vt::Queue& host, const vt::Tensor& t, bool* finite) {
  VT_CHECK(t.device().is_cpu() && t.is_contiguous() && (t.dtype() == vt::DType::kF32 || t.dtype() == vt::DType::kBF16),
           "AbsMax: needs a contiguous CPU F32/BF16 tensor, got ", t.Describe());
  const bool f32 = t.dtype() == vt::DType::kF32;
  std::mutex mu;
  float amax = 0.0f;
  bool ok = true;
  host.ParallelFor(t.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    float m = 0.0f;
    bool fin = true;
    for (int64_t i = b; i < e; ++i) {
      const float v = std::fabs(f32 ? t.data_as<float>()[i] : vt::Bf16ToFloat(t.data_as<uint16_t>()[i]));
      fin = fin && std::isfinite(v);
      m = std::max(m, v);
    }
    std::lock_guard<std::mutex> lock(mu);
    amax = std::max(amax, m);
    ok = ok && fin;
  });
  *finite = ok;
  return amax;
}

bool EndsWith(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The projection kind of a routed expert's projection in its block: "model.layers.1.mlp.experts.3.up_proj"
// -> "model.layers.1.mlp. gate_up" (gate and up share their input), "... down".
std::string ExpertKind(const std::string& prefix) {
  return prefix.substr(0, prefix.rfind("experts.")) + (EndsWith(prefix, "down_proj") ? " down" : " gate_up");
}

// A routed expert's projection inside a fused expert tensor (transformers 5): rows
// [row0, row1) of `tensor` viewed as [rows, cols] (`experts.gate_up_proj` [E, 2I, H] as
// [E * 2I, H]: expert e's gate rows, then its up rows; `experts.down_proj` [E, H, I] as
// [E * H, I]).
struct FusedSlice {
  std::string tensor;
  int64_t rows = 0, cols = 0, row0 = 0, row1 = 0;
};

// The projections in fused expert tensors by prefix ("model.layers.1.mlp.experts.3.up_proj"),
// and each fused tensor's projection prefixes in expert order.
struct FusedExperts {
  std::map<std::string, FusedSlice> slices;
  std::map<std::string, std::vector<std::string>> members;
};

// The checkpoint's fused expert tensors, after checking their dtype (BF16) and shape
// against the config.
FusedExperts FindFusedExperts(const Checkpoint& ckpt, const ModelConfig& cfg) {
  FusedExperts out;
  const int64_t E = cfg.num_experts, H = cfg.hidden_size, I = cfg.moe_intermediate_size;
  for (const std::string& n : ckpt.names()) {
    const bool gu = EndsWith(n, "experts.gate_up_proj"), dn = EndsWith(n, "experts.down_proj");
    if (cfg.num_experts == 0 || !(gu || dn)) continue;
    const TensorInfo& info = ckpt.Info(n);
    const vt::Shape want = gu ? vt::Shape{E, 2 * I, H} : vt::Shape{E, H, I};
    if (info.dtype != vt::DType::kBF16 || info.shape != want)
      ThrowLoadError(ckpt.FileOf(n), ": tensor '", n, "' is ", vt::DTypeName(info.dtype), " ",
                     vt::ShapeToString(info.shape), "; vtllm quantize takes fused experts as BF16 ",
                     vt::ShapeToString(want), " (num_experts, ", gu ? "2 * moe_intermediate_size, hidden_size" :
                     "hidden_size, moe_intermediate_size", ")");
    const std::string base = n.substr(0, n.size() - (gu ? 12 : 9));  // "...mlp.experts."
    for (int64_t e = 0; e < E; ++e) {
      const std::string p = base + std::to_string(e) + ".";
      std::vector<std::string>& members = out.members[n];
      if (gu) {
        out.slices[p + "gate_proj"] = {n, E * 2 * I, H, e * 2 * I, e * 2 * I + I};
        out.slices[p + "up_proj"] = {n, E * 2 * I, H, e * 2 * I + I, (e + 1) * 2 * I};
        members.insert(members.end(), {p + "gate_proj", p + "up_proj"});
      } else {
        out.slices[p + "down_proj"] = {n, E * H, I, e * H, (e + 1) * H};
        members.push_back(p + "down_proj");
      }
    }
  }
  return out;
}

bool IsOutputHead(const std::string& prefix) { return prefix == "lm_head" || prefix == "model.embed_tokens"; }

// Keeps the running max |x| of each decoder linear's input, by shard.
class AmaxObserver final : public LinearInputObserver {
 public:
  explicit AmaxObserver(const vt::Queue& host) : host_(host) {}
  void Observe(const vt::Queue& q, std::span<const std::string> prefixes, const vt::Tensor& x) override {
    if (prefixes.empty() || IsOutputHead(prefixes[0])) return;
    q.Synchronize();
    const vt::Tensor h = x.device().is_cpu() && x.is_contiguous() ? x : x.To(vt::Device::Cpu());
    bool finite = true;
    const float m = AbsMax(host_, h, &finite);
    for (const std::string& p : prefixes) {
      float& a = amax_[p];
      a = std::max(a, m);
      if (!finite) nonfinite_.insert(p);
    }
  }
  // Every routed expert's projections, with the tokens each saw: an expert the calibration
  // did not reach keeps amax 0 and 0 tokens.
  void ObserveExperts(const std::string& prefix, std::span<const int64_t> tokens, std::span<const float> gate_up,
                      std::span<const float> down) override {
    for (size_t e = 0; e < tokens.size(); ++e) {
      const std::string base = prefix + "experts." + std::to_string(e) + ".";
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        const std::string p = base + proj;
        const float m = proj[0] == 'd' ? down[e] : gate_up[e];
        float& a = amax_[p];
        if (std::isnan(m)) nonfinite_.insert(p);
        else a = std::max(a, m);
        expert_tokens_[p] += tokens[e];
      }
    }
  }
  std::map<std::string, float> amax_;
  std::map<std::string, int64_t> expert_tokens_;
  std::set<std::string> nonfinite_;

 private:
  const vt::Queue& host_;
};

void CheckOutDir(const std::string& out_dir) {
  VT_CHECK(!out_dir.empty(), "vtllm quantize: --out is empty");
  std::error_code ec;
  if (!fs::exists(out_dir, ec)) return;
  VT_CHECK(fs::is_directory(out_dir, ec), "vtllm quantize: --out ", out_dir, " exists and is not a directory");
  VT_CHECK(fs::is_empty(out_dir, ec), "vtllm quantize: --out ", out_dir,
           " exists and is not empty; give a new or empty directory");
}

void WriteText(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  VT_CHECK(f, "vtllm quantize: cannot create ", path);
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  VT_CHECK(std::fclose(f) == 0 && ok, "vtllm quantize: write to ", path, " failed");
}

json ScaleArgs() {
  return {{"type", "float"}, {"num_bits", 8}, {"strategy", "tensor"}, {"symmetric", true}, {"dynamic", false}};
}

// The files next to the weights a checkpoint needs besides config.json.
constexpr const char* kCopiedFiles[] = {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                                        "special_tokens_map.json", "added_tokens.json", "vocab.json",
                                        "merges.txt", "tokenizer.model", "chat_template.jinja",
                                        "chat_template.json"};

}  // namespace

namespace {

// The attention prefix of each KV-cache layer, in cache order: the layers that are not
// Gated DeltaNet layers, under the checkpoint's root.
std::vector<std::string> AttentionPrefixes(const ModelConfig& cfg, const Checkpoint& ckpt) {
  const std::string root = ckpt.Has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  std::vector<std::string> out;
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    if (!cfg.IsHybrid() || !cfg.IsLinearAttentionLayer(l))
      out.push_back(root + "layers." + std::to_string(l) + ".self_attn.");
  return out;
}

// Max |x| over the first n slots' rows of one F32 cache tensor [blocks, block_size, Hk, D].
float CacheAmax(const vt::Tensor& cache, const KvCache& kv, const SequenceKv& seq, int64_t n, bool* finite) {
  const int64_t width = cache.dim(2) * cache.dim(3);
  float amax = 0.0f;
  for (int64_t p = 0; p < n; ++p) {
    const float* row = cache.data_as<float>() + kv.SlotOf(seq, p) * width;
    for (int64_t i = 0; i < width; ++i) {
      *finite = *finite && std::isfinite(row[i]);
      amax = std::max(amax, std::fabs(row[i]));
    }
  }
  return amax;
}

}  // namespace

std::map<std::string, float> CalibrateInputAmax(const std::string& model_dir,
                                                const std::vector<std::vector<int32_t>>& windows, int cpu_threads,
                                                bool progress,
                                                std::map<std::string, std::pair<float, float>>* kv_amax,
                                                std::map<std::string, int64_t>* expert_tokens) {
  int64_t total = 0;
  for (const auto& w : windows) total += static_cast<int64_t>(w.size());
  VT_CHECK(total > 0, "vtllm quantize: no calibration tokens");
  const vt::Queue host = vt::Queue::Cpu(cpu_threads);
  AmaxObserver obs(host);
  LoadOptions o;
  o.device = vt::Device::Cpu();
  o.dtype = vt::DType::kF32;
  o.cpu_threads = cpu_threads;
  o.progress = progress;
  o.observer = &obs;
  std::unique_ptr<Model> model = Model::Load(model_dir, o);
  std::unique_ptr<LoadProgress> bar;
  LoadProgress::Options po;
  po.unit = "tokens";
  if (progress) bar = std::make_unique<LoadProgress>(static_cast<uint64_t>(total), "Calibrating", po);
  const std::vector<std::string> attn_prefixes =
      kv_amax != nullptr ? AttentionPrefixes(model->config(), Checkpoint::Open(model_dir)) : std::vector<std::string>{};
  for (const auto& w : windows) {
    if (w.empty()) continue;
    KvCache cache = model->MakeKvCache(static_cast<int64_t>(w.size()), 16);
    SequenceKv seq;
    std::vector<int64_t> pos(w.size());
    std::iota(pos.begin(), pos.end(), 0);
    model->Forward(w, pos, {&cache, &seq});
    if (kv_amax != nullptr) {  // the cache holds this window's keys and values in F32
      const std::vector<std::string>& prefixes = attn_prefixes;
      VT_CHECK(static_cast<int64_t>(prefixes.size()) == cache.spec().num_layers, "vtllm quantize: ",
               prefixes.size(), " attention layers in the config but ", cache.spec().num_layers, " in the cache");
      for (size_t l = 0; l < prefixes.size(); ++l) {
        bool finite = true;
        auto& [k, v] = (*kv_amax)[prefixes[l]];
        k = std::max(k, CacheAmax(cache.key(static_cast<int64_t>(l)), cache, seq, seq.num_tokens, &finite));
        v = std::max(v, CacheAmax(cache.value(static_cast<int64_t>(l)), cache, seq, seq.num_tokens, &finite));
        if (!finite)
          throw vt::Error(vt::StrCat("vtllm quantize: the keys or values of ", prefixes[l],
                                     " hold NaN or Inf on the calibration text"));
      }
    }
    if (bar) bar->Advance(w.size());
  }
  if (bar) bar->Finish();
  if (!obs.nonfinite_.empty())
    throw vt::Error(vt::StrCat("vtllm quantize: the calibration input of ", *obs.nonfinite_.begin(),
                               " holds NaN or Inf (the BF16 model overflows on the calibration text)"));
  VT_CHECK(!obs.amax_.empty(), "vtllm quantize: ", model_dir, " has no decoder linears to quantize");
  if (expert_tokens != nullptr) *expert_tokens = obs.expert_tokens_;
  return obs.amax_;
}

QuantizeReport QuantizeCheckpoint(const std::string& model_dir, const std::string& out_dir,
                                  const QuantizeOptions& options) {
  const std::string& format = options.format;
  VT_CHECK(format == "modelopt" || format == "compressed-tensors", "vtllm quantize: --format \"", format,
           "\" is not modelopt or compressed-tensors");
  CheckOutDir(out_dir);
  const ModelConfig cfg = ModelConfig::FromDir(model_dir);
  const QuantConfig src_quant = QuantConfig::FromDir(model_dir);
  if (src_quant.method != QuantMethod::kNone)
    ThrowLoadError(model_dir, " is already quantized (", src_quant.format,
                   "); vtllm quantize takes a BF16 checkpoint");
  const Checkpoint ckpt = Checkpoint::Open(model_dir);
  // Fused experts are written one tensor per expert (the names the static loaders read).
  const FusedExperts fused = FindFusedExperts(ckpt, cfg);
  for (const std::string& n : ckpt.names()) {
    const vt::DType dt = ckpt.Info(n).dtype;
    if (n.size() > 12 && n.compare(n.size() - 12, 12, "_proj.weight") == 0 && dt != vt::DType::kBF16)
      ThrowLoadError(ckpt.FileOf(n), ": tensor '", n, "' is ", vt::DTypeName(dt),
                     "; vtllm quantize takes a BF16 checkpoint");
  }

  QuantizeReport report;
  for (const auto& w : options.calibration) report.calibration_tokens += static_cast<int64_t>(w.size());
  std::map<std::string, int64_t> expert_tokens;
  report.input_amax = CalibrateInputAmax(model_dir, options.calibration, options.cpu_threads, options.progress,
                                         options.kv_cache_fp8 ? &report.kv_amax : nullptr, &expert_tokens);
  // An expert no calibration token reached has no amax of its own: it takes the largest of
  // its block's calibrated experts of the same projection kind (gate/up or down), the scale
  // the static loaders (vtllm's and vLLM's) give every expert of the block anyway.
  std::map<std::string, float> kind_amax;
  for (const auto& [prefix, tokens] : expert_tokens) {
    if (tokens > 0) {
      float& m = kind_amax[ExpertKind(prefix)];
      m = std::max(m, report.input_amax.at(prefix));
    } else {
      report.uncalibrated_experts.push_back(prefix);
    }
  }

  // Weight scales, checked before anything is written.
  const vt::Queue host = vt::Queue::Cpu(options.cpu_threads);
  // A projection's BF16 weight [N, K], and "FILE: tensor 'NAME'" for messages.
  auto weight_of = [&](const std::string& prefix, std::string* where) {
    const auto f = fused.slices.find(prefix);
    const std::string name = f == fused.slices.end() ? prefix + ".weight" : f->second.tensor;
    *where = vt::StrCat(ckpt.FileOf(name), ": tensor '", name, "'");
    if (f == fused.slices.end()) return ckpt.Get(name);
    const FusedSlice& fs = f->second;
    *where += vt::StrCat(" (rows ", fs.row0, " to ", fs.row1, " of it as [", fs.rows, ", ", fs.cols, "], ", prefix, ")");
    return ckpt.Get(name).View({fs.rows, fs.cols}).Slice(0, fs.row0, fs.row1);
  };
  for (const auto& [prefix, amax] : report.input_amax) {
    std::string where;
    const vt::Tensor w = weight_of(prefix, &where);
    VT_CHECK(w.dtype() == vt::DType::kBF16 && w.ndim() == 2, "vtllm quantize: ", where, " is ", w.Describe(),
             "; a linear weight must be 2-D BF16");
    bool finite = true;
    const float wmax = AbsMax(host, w, &finite);
    if (!finite) ThrowLoadError(where, " holds NaN or Inf; it cannot be quantized");
    report.weight_scale[prefix] = ScaleOf(wmax);
    const auto seen = expert_tokens.find(prefix);
    const bool uncalibrated = seen != expert_tokens.end() && seen->second == 0;
    report.input_scale[prefix] = ScaleOf(uncalibrated ? kind_amax[ExpertKind(prefix)] : amax);
  }

  // model.safetensors: every tensor as stored, but the quantized linears' weights (FP8) and
  // their two scales.
  const bool ct = format == "compressed-tensors";
  const vt::Shape scale_shape = ct ? vt::Shape{1} : vt::Shape{};
  std::unique_ptr<LoadProgress> bar;
  if (options.progress) bar = std::make_unique<LoadProgress>(ckpt.total_bytes(), "Writing FP8 weights");
  SafetensorsWriter writer;
  writer.SetMetadata("format", "pt");
  auto add_quantized = [&](const std::string& prefix, const vt::Tensor& src) {
    const float ws = report.weight_scale.at(prefix), is = report.input_scale.at(prefix);
    LoadProgress* b = bar.get();
    writer.AddGenerated(prefix + ".weight", vt::DType::kF8E4M3, src.shape(), [src, ws, b, &host](void* dst, size_t nbytes) {
      const vt::Tensor out = vt::Tensor::Borrow(dst, src.shape(), vt::DType::kF8E4M3, vt::Device::Cpu(), nullptr);
      vt::QuantFp8Static(host, out, src, ws);
      if (b) b->Advance(nbytes * 2);
    });
    writer.Add(prefix + ".weight_scale", vt::DType::kF32, scale_shape, &ws);
    writer.Add(prefix + ".input_scale", vt::DType::kF32, scale_shape, &is);
  };
  for (const std::string& n : ckpt.names()) {
    const TensorInfo& info = ckpt.Info(n);
    const std::string prefix = n.size() > 7 ? n.substr(0, n.size() - 7) : "";
    const bool quantize = n.size() > 7 && n.compare(n.size() - 7, 7, ".weight") == 0 &&
                          report.weight_scale.count(prefix) > 0;
    const vt::Tensor src = ckpt.Get(n);
    if (const auto f = fused.members.find(n); f != fused.members.end()) {  // one tensor per expert
      std::string where;
      for (const std::string& p : f->second) add_quantized(p, weight_of(p, &where));
      continue;
    }
    if (quantize) {
      add_quantized(prefix, src);
      continue;
    }
    LoadProgress* b = bar.get();
    writer.AddGenerated(n, info.dtype, info.shape, [src, b](void* dst, size_t nbytes) {
      if (nbytes) std::memcpy(dst, src.data(), nbytes);
      if (b) b->Advance(nbytes);
    });
  }
  // KV-cache scales, in the format's spelling (both are read by vtllm and vLLM).
  for (const auto& [prefix, amax] : report.kv_amax) {
    const float ks = ScaleOf(amax.first), vs = ScaleOf(amax.second);
    writer.Add(prefix + (ct ? "k_scale" : "k_proj.k_scale"), vt::DType::kF32, scale_shape, &ks);
    writer.Add(prefix + (ct ? "v_scale" : "v_proj.v_scale"), vt::DType::kF32, scale_shape, &vs);
  }
  const bool kv = !report.kv_amax.empty();
  const json kv_scheme = kv ? json{{"type", "float"}, {"num_bits", 8}, {"strategy", "tensor"}, {"dynamic", false},
                                   {"symmetric", true}}
                            : json(nullptr);
  const json kv_algo = kv ? json("FP8") : json(nullptr);

  json config = ReadJsonFile(JoinPath(model_dir, "config.json"));
  // Kept in BF16 and listed as such: lm_head, and in MoE models the routers and the shared
  // experts' gates (not linears of the quantized kind; vLLM keeps them unquantized).
  json exclude = json::array({"lm_head"});
  if (cfg.num_experts > 0) exclude.push_back(ct ? "re:.*mlp\\.gate$" : "*.mlp.gate");
  if (cfg.num_experts > 0 && cfg.shared_expert_intermediate_size > 0)
    exclude.push_back(ct ? "re:.*mlp\\.shared_expert_gate$" : "*.mlp.shared_expert_gate");
  if (ct) {
    json group = {{"targets", {"Linear"}}, {"weights", ScaleArgs()}, {"input_activations", ScaleArgs()},
                  {"output_activations", nullptr}, {"format", "float-quantized"}};
    config["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                     {"format", "float-quantized"},
                                     {"quantization_status", "compressed"},
                                     {"config_groups", {{"group_0", group}}},
                                     {"ignore", exclude},
                                     {"kv_cache_scheme", kv_scheme},
                                     {"sparsity_config", json::object()}};
  } else {
    config["quantization_config"] = {{"quant_method", "modelopt"},
                                     {"quant_algo", "FP8"},
                                     {"kv_cache_quant_algo", kv_algo},
                                     {"exclude_modules", exclude}};
  }

  std::error_code ec;
  const bool created = !fs::exists(out_dir, ec);
  try {
    fs::create_directories(out_dir);
    const std::string weights = JoinPath(out_dir, "model.safetensors");
    writer.Write(weights);
    report.bytes_written = fs::file_size(weights);
    WriteText(JoinPath(out_dir, "config.json"), config.dump(2) + "\n");
    if (!ct) {
      const json hf = {{"producer", {{"name", "vtllm"}, {"version", "quantize"}}},
                       {"quantization", {{"quant_algo", "FP8"}, {"kv_cache_quant_algo", kv_algo},
                                         {"exclude_modules", exclude}}}};
      WriteText(JoinPath(out_dir, "hf_quant_config.json"), hf.dump(2) + "\n");
    }
    for (const char* f : kCopiedFiles) {
      const std::string from = JoinPath(model_dir, f);
      if (FileExists(from)) fs::copy_file(from, JoinPath(out_dir, f));
    }
  } catch (...) {
    if (created) {
      fs::remove_all(out_dir, ec);
    } else {
      for (const auto& e : fs::directory_iterator(out_dir, ec)) fs::remove_all(e.path(), ec);
    }
    throw;
  }
  if (bar) bar->Finish();
  return report;
}

}  // namespace vtllm::model
