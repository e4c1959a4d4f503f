#include "model/config.h"

#include <optional>

#include <nlohmann/json.hpp>

#include "model/load_error.h"

namespace vtllm::model {

namespace {

using nlohmann::json;

// Typed access to the fields of one JSON object, with errors naming the file and the
// field's dotted path. A field that is null counts as absent.
class Fields {
 public:
  Fields(const std::string& file, const json& obj, std::string prefix = "")
      : file_(file), obj_(obj), prefix_(std::move(prefix)) {}

  std::string Path(const std::string& name) const { return prefix_ + name; }
  const json* Raw(const std::string& name) const {
    auto it = obj_.find(name);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  [[noreturn]] void Fail(const std::string& name, const std::string& what) const {
    ThrowLoadError(file_, ": field '", Path(name), "' ", what);
  }
  [[noreturn]] void Missing(const std::string& name) const {
    ThrowLoadError(file_, ": missing required field '", Path(name), "'");
  }

  std::optional<int64_t> Int(const std::string& name) const {
    const json* v = Raw(name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) Fail(name, "must be an integer, got " + DescribeJson(*v));
    return v->get<int64_t>();
  }
  int64_t PositiveInt(const std::string& name) const {
    const auto v = Int(name);
    if (!v) Missing(name);
    if (*v <= 0) Fail(name, vt::StrCat("must be > 0, got ", *v));
    return *v;
  }
  std::optional<double> Number(const std::string& name) const {
    const json* v = Raw(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) Fail(name, "must be a number, got " + DescribeJson(*v));
    return v->get<double>();
  }
  double PositiveNumber(const std::string& name, std::optional<double> fallback) const {
    auto v = Number(name);
    if (!v && !fallback) Missing(name);
    const double x = v ? *v : *fallback;
    if (!(x > 0)) Fail(name, vt::StrCat("must be > 0, got ", x));
    return x;
  }
  std::optional<bool> Bool(const std::string& name) const {
    const json* v = Raw(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) Fail(name, "must be true or false, got " + DescribeJson(*v));
    return v->get<bool>();
  }
  std::optional<std::string> String(const std::string& name) const {
    const json* v = Raw(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) Fail(name, "must be a string, got " + DescribeJson(*v));
    return v->get<std::string>();
  }
  const json* Object(const std::string& name) const {
    const json* v = Raw(name);
    if (v && !v->is_object()) Fail(name, "must be an object, got " + DescribeJson(*v));
    return v;
  }
  // An integer or a list of integers (eos_token_id); null or absent gives {}.
  std::vector<int64_t> IntList(const std::string& name) const {
    const json* v = Raw(name);
    if (!v) return {};
    if (v->is_number_integer()) return {v->get<int64_t>()};
    if (!v->is_array()) Fail(name, "must be an integer or a list of integers, got " + DescribeJson(*v));
    std::vector<int64_t> out;
    for (const auto& x : *v) {
      if (!x.is_number_integer())
        Fail(name, "must be an integer or a list of integers, got " + DescribeJson(*v));
      out.push_back(x.get<int64_t>());
    }
    return out;
  }

 private:
  const std::string& file_;
  const json& obj_;
  std::string prefix_;
};

json ReadObject(const std::string& path) {
  json j = ReadJsonFile(path);
  if (!j.is_object()) ThrowLoadError(path, ": must be a JSON object, got ", DescribeJson(j));
  return j;
}

// HF's default max_position_embeddings per model type, for configs that omit it.
std::optional<int64_t> DefaultMaxPositions(const std::string& model_type) {
  if (model_type == "llama") return 2048;
  if (model_type == "qwen2") return 32768;
  if (model_type == "qwen3") return 40960;
  if (model_type == "qwen3_moe") return 32768;
  if (model_type == "qwen3_next" || model_type == "qwen3_5_text" || model_type == "qwen3_5" ||
      model_type == "qwen3_5_moe_text" || model_type == "qwen3_5_moe")
    return 32768;
  return std::nullopt;
}

void ParseRope(const std::string& path, const json& j, ModelConfig& c, const std::string& prefix = "") {
  const Fields top(path, j, prefix);
  // transformers 5 keeps theta and scaling together in rope_parameters; older configs have
  // top-level rope_theta and an optional rope_scaling object.
  const char* rope_key = top.Object("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const json* rope = top.Object(rope_key);
  const auto top_theta = top.Number("rope_theta");
  if (top_theta) {
    c.rope_theta = top.PositiveNumber("rope_theta", std::nullopt);
  } else if (rope) {
    c.rope_theta = Fields(path, *rope, std::string(rope_key) + ".").PositiveNumber("rope_theta", 10000.0);
  }
  if (!rope) return;
  const Fields r(path, *rope, std::string(rope_key) + ".");
  std::string type_key = r.Raw("rope_type") ? "rope_type" : "type";
  const std::string type = r.String(type_key).value_or("default");
  c.rope_scaling.type = type;
  if (auto prf = r.Number("partial_rotary_factor")) {
    if (!(*prf > 0 && *prf <= 1)) r.Fail("partial_rotary_factor", vt::StrCat("must be in (0, 1], got ", *prf));
    c.partial_rotary_factor = *prf;
  }
  if (type == "default") return;
  if (type == "llama3") {
    c.rope_scaling.factor = r.PositiveNumber("factor", std::nullopt);
    c.rope_scaling.low_freq_factor = r.PositiveNumber("low_freq_factor", std::nullopt);
    c.rope_scaling.high_freq_factor = r.PositiveNumber("high_freq_factor", std::nullopt);
    c.rope_scaling.original_max_position_embeddings = r.PositiveInt("original_max_position_embeddings");
    if (!(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor))
      r.Fail("high_freq_factor", vt::StrCat("must exceed low_freq_factor (", c.rope_scaling.low_freq_factor,
                                            "), got ", c.rope_scaling.high_freq_factor));
    return;
  }
  ThrowLoadError(path, ": rope type '", type, "' (field '", r.Path(type_key),
                 "') is not supported yet (supported: default, llama3)");
}

// The Gated DeltaNet hybrid fields (HF's Qwen3NextConfig / Qwen3_5TextConfig).
void ParseHybrid(const Fields& f, ModelConfig& c) {
  if (const json* v = f.Raw("layer_types")) {
    if (!v->is_array() || static_cast<int64_t>(v->size()) != c.num_hidden_layers)
      f.Fail("layer_types", vt::StrCat("must be a list of ", c.num_hidden_layers,
                                       " layer types (num_hidden_layers), got ", DescribeJson(*v)));
    for (const auto& x : *v) {
      if (!x.is_string() || (x.get<std::string>() != "linear_attention" && x.get<std::string>() != "full_attention"))
        f.Fail("layer_types", "entries must be \"linear_attention\" or \"full_attention\", got " + DescribeJson(x));
      c.layer_types.push_back(x.get<std::string>());
    }
  } else {
    const int64_t interval = f.Int("full_attention_interval") ? f.PositiveInt("full_attention_interval") : 4;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      c.layer_types.push_back((i + 1) % interval == 0 ? "full_attention" : "linear_attention");
  }
  c.linear_conv_kernel_dim = f.PositiveInt("linear_conv_kernel_dim");
  if (c.linear_conv_kernel_dim < 2)
    f.Fail("linear_conv_kernel_dim", vt::StrCat("must be at least 2, got ", c.linear_conv_kernel_dim));
  c.linear_key_head_dim = f.PositiveInt("linear_key_head_dim");
  c.linear_value_head_dim = f.PositiveInt("linear_value_head_dim");
  c.linear_num_key_heads = f.PositiveInt("linear_num_key_heads");
  c.linear_num_value_heads = f.PositiveInt("linear_num_value_heads");
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
    f.Fail("linear_num_value_heads", vt::StrCat("(", c.linear_num_value_heads,
                                                ") must be a multiple of linear_num_key_heads (",
                                                c.linear_num_key_heads, ")"));
  if (auto prf = f.Number("partial_rotary_factor")) {
    if (!(*prf > 0 && *prf <= 1)) f.Fail("partial_rotary_factor", vt::StrCat("must be in (0, 1], got ", *prf));
    c.partial_rotary_factor = *prf;
  }
  const double rot = c.partial_rotary_factor * static_cast<double>(c.head_dim);
  if (rot != static_cast<double>(static_cast<int64_t>(rot)) || static_cast<int64_t>(rot) % 2 != 0)
    f.Fail("partial_rotary_factor", vt::StrCat("(", c.partial_rotary_factor, ") times head_dim (", c.head_dim,
                                               ") must be an even number of rotary dims"));
  c.attn_output_gate = f.Bool("attn_output_gate").value_or(true);
}

// The mixture-of-experts fields of a MoE architecture (HF's Qwen3MoeConfig): the sizes are
// required, the rest take HF's defaults (decoder_sparse_step 1, no mlp_only_layers,
// norm_topk_prob false).
void ParseMoe(const Fields& f, ModelConfig& c) {
  const char* experts_key = !f.Raw("num_experts") && f.Raw("num_local_experts") ? "num_local_experts" : "num_experts";
  c.num_experts = f.PositiveInt(experts_key);
  c.num_experts_per_tok = f.PositiveInt("num_experts_per_tok");
  if (c.num_experts_per_tok > c.num_experts)
    f.Fail("num_experts_per_tok", vt::StrCat("(", c.num_experts_per_tok, ") must not exceed ", experts_key, " (",
                                             c.num_experts, ")"));
  c.moe_intermediate_size = f.PositiveInt("moe_intermediate_size");
  c.norm_topk_prob = f.Bool("norm_topk_prob").value_or(false);
  c.decoder_sparse_step = f.Int("decoder_sparse_step") ? f.PositiveInt("decoder_sparse_step") : 1;
  if (const json* v = f.Raw("mlp_only_layers")) {
    if (!v->is_array()) f.Fail("mlp_only_layers", "must be a list of layer indices, got " + DescribeJson(*v));
    for (const auto& x : *v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= c.num_hidden_layers)
        f.Fail("mlp_only_layers", vt::StrCat("must hold layer indices in [0, ", c.num_hidden_layers,
                                             ") (num_hidden_layers), got ", DescribeJson(*v)));
      c.mlp_only_layers.push_back(x.get<int64_t>());
    }
  }
}

// HF's Qwen3_5MoeTextConfig: every layer sparse, with a shared expert behind a sigmoid gate.
// The class has no intermediate_size, decoder_sparse_step, mlp_only_layers or norm_topk_prob:
// its router always renormalises the top-k weights. A config that spells one of those with
// a value that would change the model is refused, naming the field.
void ParseQwen3_5Moe(const Fields& f, ModelConfig& c) {
  c.num_experts = f.PositiveInt("num_experts");
  c.num_experts_per_tok = f.PositiveInt("num_experts_per_tok");
  if (c.num_experts_per_tok > c.num_experts)
    f.Fail("num_experts_per_tok", vt::StrCat("(", c.num_experts_per_tok, ") must not exceed num_experts (",
                                             c.num_experts, ")"));
  c.moe_intermediate_size = f.PositiveInt("moe_intermediate_size");
  c.shared_expert_intermediate_size = f.PositiveInt("shared_expert_intermediate_size");
  if (f.Bool("norm_topk_prob").value_or(true) != true)
    f.Fail("norm_topk_prob", "is false, but Qwen3.5-MoE's router always renormalises the top-k routing weights");
  c.norm_topk_prob = true;
  if (f.Int("decoder_sparse_step") && f.PositiveInt("decoder_sparse_step") != 1)
    f.Fail("decoder_sparse_step", vt::StrCat("must be 1 (every Qwen3.5-MoE layer is sparse), got ",
                                             *f.Int("decoder_sparse_step")));
  if (const json* v = f.Raw("mlp_only_layers"); v && !(v->is_array() && v->empty()))
    f.Fail("mlp_only_layers", "must be empty or absent (every Qwen3.5-MoE layer is sparse), got " + DescribeJson(*v));
  c.decoder_sparse_step = 1;
}

bool IsQwen3_5Moe(const std::string& arch) {
  return arch == "Qwen3_5MoeForCausalLM" || arch == "Qwen3_5MoeForConditionalGeneration";
}

}  // namespace

bool ModelConfig::IsSparseLayer(int64_t layer) const {
  if (num_experts <= 0 || decoder_sparse_step <= 0) return false;
  for (int64_t l : mlp_only_layers)
    if (l == layer) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

vt::DType ParseTorchDType(const std::string& name, const std::string& where) {
  std::string n = name;
  if (n.rfind("torch.", 0) == 0) n = n.substr(6);
  if (n == "bfloat16" || n == "bf16") return vt::DType::kBF16;
  if (n == "float16" || n == "half" || n == "fp16") return vt::DType::kF16;
  if (n == "float32" || n == "float" || n == "fp32") return vt::DType::kF32;
  if (n == "float8_e4m3fn") return vt::DType::kF8E4M3;
  ThrowLoadError(where, " is '", name, "', not a supported dtype (bfloat16, float16, float32)");
}

ModelConfig ModelConfig::FromDir(const std::string& dir) { return FromFile(JoinPath(dir, "config.json")); }

ModelConfig ModelConfig::FromFile(const std::string& path) {
  const json j = ReadObject(path);
  const Fields top(path, j);
  ModelConfig c;
  // A multimodal wrapper (Qwen3.5's) keeps the text model's fields under text_config.
  const json* text = top.Object("text_config");
  c.nested_text_config = text != nullptr;
  const json& tj = text ? *text : j;
  const Fields f(path, tj, text ? "text_config." : "");

  const json* archs = top.Raw("architectures");
  if (!archs) top.Missing("architectures");
  if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string())
    top.Fail("architectures", "must be a non-empty list of strings, got " + DescribeJson(*archs));
  c.architecture = (*archs)[0].get<std::string>();
  c.model_type = f.String("model_type").value_or(top.String("model_type").value_or(""));
  if (c.model_type.empty()) top.Missing("model_type");

  c.hidden_size = f.PositiveInt("hidden_size");
  // Qwen3.5-MoE has no dense MLP, so no intermediate_size.
  if (!IsQwen3_5Moe(c.architecture) || f.Raw("intermediate_size")) c.intermediate_size = f.PositiveInt("intermediate_size");
  c.num_hidden_layers = f.PositiveInt("num_hidden_layers");
  c.num_attention_heads = f.PositiveInt("num_attention_heads");
  c.vocab_size = f.PositiveInt("vocab_size");
  c.num_key_value_heads = f.Int("num_key_value_heads") ? f.PositiveInt("num_key_value_heads") : c.num_attention_heads;
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    f.Fail("num_key_value_heads", vt::StrCat("(", c.num_key_value_heads, ") must divide num_attention_heads (",
                                             c.num_attention_heads, ")"));
  if (f.Int("head_dim")) {
    c.head_dim = f.PositiveInt("head_dim");
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      f.Fail("head_dim", vt::StrCat("is absent and hidden_size (", c.hidden_size,
                                    ") is not a multiple of num_attention_heads (", c.num_attention_heads, ")"));
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (f.Int("max_position_embeddings")) {
    c.max_position_embeddings = f.PositiveInt("max_position_embeddings");
  } else if (auto d = DefaultMaxPositions(c.model_type)) {
    c.max_position_embeddings = *d;
  } else {
    f.Missing("max_position_embeddings");
  }
  c.rms_norm_eps = f.PositiveNumber("rms_norm_eps", 1e-6);
  ParseRope(path, tj, c, text ? "text_config." : "");

  c.tie_word_embeddings = f.Bool("tie_word_embeddings").value_or(false);
  c.attention_bias = f.Bool("attention_bias").value_or(false) || c.model_type == "qwen2";
  c.hidden_act = f.String("hidden_act").value_or("silu");

  // transformers 5 writes `dtype`; older versions `torch_dtype`.
  const char* dtype_key = f.Raw("dtype") ? "dtype" : "torch_dtype";
  const Fields& df = f.Raw(dtype_key) || !text ? f : top;
  if (&df == &top) dtype_key = top.Raw("dtype") ? "dtype" : "torch_dtype";
  if (auto d = df.String(dtype_key))
    c.dtype = ParseTorchDType(*d, vt::StrCat(path, ": field '", df.Path(dtype_key), "'"));

  c.eos_token_ids = f.IntList("eos_token_id");
  c.bos_token_id = f.Int("bos_token_id").value_or(-1);
  if (c.architecture == "Qwen3MoeForCausalLM" || c.architecture == "Qwen2MoeForCausalLM") ParseMoe(f, c);
  if (c.architecture == "Qwen2MoeForCausalLM")
    c.shared_expert_intermediate_size = f.PositiveInt("shared_expert_intermediate_size");
  if (c.architecture == "Qwen3NextForCausalLM") {
    ParseMoe(f, c);
    c.shared_expert_intermediate_size = f.Int("shared_expert_intermediate_size").value_or(0);
    if (c.shared_expert_intermediate_size < 0)
      f.Fail("shared_expert_intermediate_size", vt::StrCat("must be >= 0, got ", c.shared_expert_intermediate_size));
  }
  if (IsQwen3_5Moe(c.architecture)) ParseQwen3_5Moe(f, c);
  if (c.architecture == "Qwen3NextForCausalLM" || c.architecture == "Qwen3_5ForCausalLM" ||
      c.architecture == "Qwen3_5ForConditionalGeneration" || IsQwen3_5Moe(c.architecture))
    ParseHybrid(f, c);
  return c;
}

GenerationConfig GenerationConfig::FromDir(const std::string& dir) {
  GenerationConfig g;
  const std::string path = JoinPath(dir, "generation_config.json");
  if (!FileExists(path)) return g;
  const json j = ReadObject(path);
  const Fields f(path, j);
  g.temperature = f.Number("temperature").value_or(g.temperature);
  if (g.temperature < 0) f.Fail("temperature", vt::StrCat("must be >= 0, got ", g.temperature));
  g.top_p = f.Number("top_p").value_or(g.top_p);
  if (!(g.top_p > 0 && g.top_p <= 1)) f.Fail("top_p", vt::StrCat("must be in (0, 1], got ", g.top_p));
  g.min_p = f.Number("min_p").value_or(g.min_p);
  if (!(g.min_p >= 0 && g.min_p <= 1)) f.Fail("min_p", vt::StrCat("must be in [0, 1], got ", g.min_p));
  g.repetition_penalty = f.Number("repetition_penalty").value_or(g.repetition_penalty);
  if (!(g.repetition_penalty > 0))
    f.Fail("repetition_penalty", vt::StrCat("must be > 0, got ", g.repetition_penalty));
  g.top_k = f.Int("top_k").value_or(g.top_k);
  if (g.top_k < 0) g.top_k = 0;  // HF and vLLM both read a negative top_k as "disabled"
  g.eos_token_ids = f.IntList("eos_token_id");
  g.bos_token_id = f.Int("bos_token_id").value_or(-1);
  return g;
}

}  // namespace vtllm::model
