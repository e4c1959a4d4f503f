#include "model/quant_config.h"

#include <fnmatch.h>

#include <algorithm>
#include <optional>
#include <regex>

#include <nlohmann/json.hpp>

#include "model/load_error.h"
#include "vt/error.h"

namespace vtllm::model {

namespace {

using nlohmann::json;

constexpr const char* kSupported =
    "supported: modelopt FP8, compressed-tensors FP8 static per-tensor or per-channel weights with dynamic "
    "per-token activations, block FP8 (quant_method fp8, dynamic activations, weight_block_size)";

// One JSON object and the file and dotted path it came from, for messages.
struct Node {
  const std::string& file;
  const json& obj;
  std::string path;  // "quantization_config.config_groups.group_0.weights"

  std::string Field(const std::string& name) const { return path.empty() ? name : path + "." + name; }
  const json* Get(const std::string& name) const {
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }
  [[noreturn]] void Fail(const std::string& name, const std::string& what) const {
    ThrowLoadError(file, ": field '", Field(name), "' ", what);
  }
  [[noreturn]] void Unsupported(const std::string& name, const json& value, const std::string& why = "") const {
    ThrowLoadError(file, ": ", Field(name), " = ", value.dump(), " is not supported yet",
                   why.empty() ? "" : " (" + why + ")", "; ", kSupported);
  }
  std::string RequiredString(const std::string& name) const {
    const json* v = Get(name);
    if (!v) ThrowLoadError(file, ": missing field '", Field(name), "'");
    if (!v->is_string()) Fail(name, "must be a string, got " + DescribeJson(*v));
    return v->get<std::string>();
  }
  std::vector<std::string> StringList(const std::string& name) const {
    const json* v = Get(name);
    if (!v) return {};
    if (!v->is_array()) Fail(name, "must be a list of strings, got " + DescribeJson(*v));
    std::vector<std::string> out;
    for (const auto& s : *v) {
      if (!s.is_string()) Fail(name, "must be a list of strings, got " + DescribeJson(*v));
      out.push_back(s.get<std::string>());
    }
    return out;
  }
  Node Child(const std::string& name) const {
    const json* v = Get(name);
    if (!v) ThrowLoadError(file, ": missing field '", Field(name), "'");
    if (!v->is_object()) Fail(name, "must be an object, got " + DescribeJson(*v));
    return Node{file, *v, Field(name)};
  }
};

json ReadObject(const std::string& path) {
  json j = ReadJsonFile(path);
  if (!j.is_object()) ThrowLoadError(path, ": must be a JSON object, got ", DescribeJson(j));
  return j;
}

// ModelOpt, flat (config.json quantization_config) or nested under "quantization"
// (hf_quant_config.json). Returns the exclusions, or nullopt when quant_algo is null
// (nothing but perhaps the KV cache is quantized; KV scales are not used).
std::optional<std::vector<std::string>> ParseModelOpt(const Node& n) {
  const json* algo = n.Get("quant_algo");
  if (!algo) return std::nullopt;
  if (!algo->is_string()) n.Fail("quant_algo", "must be a string, got " + DescribeJson(*algo));
  if (algo->get<std::string>() != "FP8")
    n.Unsupported("quant_algo", *algo, "ModelOpt is supported with quant_algo FP8 only");
  // The KV cache stays in the model dtype; kv_cache_quant_algo and the k/v scales are ignored.
  return n.StringList("exclude_modules");
}

// The scheme of one compressed-tensors weights / input_activations entry: "tensor" (static),
// "channel" (weights, static) or "token" (activations, dynamic).
std::string CheckFp8Args(const Node& a, bool activations) {
  const json* type = a.Get("type");
  if (!type || *type != "float") a.Unsupported("type", type ? *type : json(nullptr), "FP8 needs type float");
  const json* bits = a.Get("num_bits");
  if (!bits || *bits != 8) a.Unsupported("num_bits", bits ? *bits : json(nullptr), "FP8 needs num_bits 8");
  const json* strategy = a.Get("strategy");
  const json* dyn = a.Get("dynamic");
  const bool dynamic = dyn && *dyn == true;
  if (dyn && !dyn->is_boolean()) a.Fail("dynamic", "must be true or false, got " + DescribeJson(*dyn));
  const std::string allowed = activations ? (dynamic ? "token" : "tensor") : "tensor or channel";
  if (!strategy || !strategy->is_string() ||
      (activations ? *strategy != (dynamic ? "token" : "tensor") : (*strategy != "tensor" && *strategy != "channel")))
    a.Unsupported("strategy", strategy ? *strategy : json(nullptr),
                  activations ? (dynamic ? "dynamic activations: per token only" : "static activations: per tensor only")
                              : "weights: per tensor or per channel");
  if (!activations && dynamic) a.Unsupported("dynamic", *dyn, "only static weight scales");
  if (const json* sym = a.Get("symmetric"); sym && *sym != true) a.Unsupported("symmetric", *sym);
  for (const char* f : {"group_size", "block_structure"})
    if (const json* v = a.Get(f)) a.Unsupported(f, *v);
  return strategy->get<std::string>();
}

bool IsAllowedCtFormat(const json& f) { return f == "float-quantized" || f == "naive-quantized"; }

void ParseCompressedTensors(const Node& qc, QuantConfig& out) {
  if (const json* f = qc.Get("format"); f && !IsAllowedCtFormat(*f))
    qc.Unsupported("format", *f, "float-quantized or naive-quantized");
  if (const json* s = qc.Get("sparsity_config")) {
    const bool dense = s->is_object() && s->contains("format") && (*s)["format"] == "dense";
    if (!dense && !(s->is_object() && s->empty())) qc.Unsupported("sparsity_config", *s);
  }
  if (const json* t = qc.Get("transform_config")) qc.Unsupported("transform_config", *t);
  // kv_cache_scheme: the KV cache stays in the model dtype; k/v scales are ignored.

  const Node groups = qc.Child("config_groups");
  if (groups.obj.empty()) qc.Fail("config_groups", "is empty");
  std::string scheme;  // "tensor/tensor" or "channel/token", one for all groups
  for (auto it = groups.obj.begin(); it != groups.obj.end(); ++it) {
    const Node g = groups.Child(it.key());
    if (const json* f = g.Get("format"); f && !IsAllowedCtFormat(*f))
      g.Unsupported("format", *f, "float-quantized or naive-quantized");
    const std::string w = CheckFp8Args(g.Child("weights"), false);
    if (!g.Get("input_activations"))
      ThrowLoadError(g.file, ": ", g.Field("input_activations"),
                     " is null: weight-only FP8 is not supported yet; ", kSupported);
    const std::string a = CheckFp8Args(g.Child("input_activations"), true);
    if ((w == "tensor") != (a == "tensor"))
      ThrowLoadError(g.file, ": ", g.Field("weights.strategy"), " = \"", w, "\" with ",
                     g.Field("input_activations.strategy"), " = \"", a, "\" is not supported yet; ", kSupported);
    const std::string s = w + "/" + a;
    if (!scheme.empty() && s != scheme)
      ThrowLoadError(g.file, ": config groups mix FP8 schemes (", scheme, ", ", s, "); not supported yet");
    scheme = s;
    if (const json* o = g.Get("output_activations")) g.Unsupported("output_activations", *o);
    const auto targets = g.StringList("targets");
    if (targets.empty()) g.Fail("targets", "must list the modules the group quantizes");
    out.targets.insert(out.targets.end(), targets.begin(), targets.end());
  }
  out.method = scheme == "tensor/tensor" ? QuantMethod::kFp8Static : QuantMethod::kFp8ChannelToken;
  out.ignore = qc.StringList("ignore");
  for (const auto& list : {out.targets, out.ignore})
    for (const auto& p : list)
      if (p.rfind("re:", 0) == 0) {
        try {
          std::regex re(p.substr(3));
        } catch (const std::regex_error& e) {
          ThrowLoadError(qc.file, ": pattern '", p, "' in ", qc.Field("ignore/targets"),
                         " is not a valid regex (", e.what(), ")");
        }
      }
}

// A ModelOpt exclusion matches a module if its glob matches the name or a dotted parent.
bool ModelOptMatches(const std::string& pattern, const std::string& module) {
  for (size_t end = 0; end != std::string::npos;) {
    end = module.find('.', end + 1);
    const std::string prefix = module.substr(0, end);
    if (::fnmatch(pattern.c_str(), prefix.c_str(), 0) == 0) return true;
  }
  return false;
}

// A compressed-tensors name: "re:" regex from the start of the name (Python's re.match),
// or the module itself or a dotted parent of it.
bool CtMatches(const std::string& pattern, const std::string& module) {
  if (pattern.rfind("re:", 0) == 0) {
    const std::regex re(pattern.substr(3));
    return std::regex_search(module, re, std::regex_constants::match_continuous);
  }
  return module == pattern || (module.size() > pattern.size() && module.compare(0, pattern.size(), pattern) == 0 &&
                               module[pattern.size()] == '.');
}

// quant_method "fp8" (transformers' FineGrainedFP8 / vLLM's Fp8Config) with dynamic
// activations and a weight block size.
void ParseBlockFp8(const Node& qc, QuantConfig& out) {
  const json* scheme = qc.Get("activation_scheme");
  if (!scheme || *scheme != "dynamic")
    qc.Unsupported("activation_scheme", scheme ? *scheme : json(nullptr), "quant_method fp8: dynamic activations only");
  if (const json* fmt = qc.Get("fmt"); fmt && *fmt != "e4m3") qc.Unsupported("fmt", *fmt, "e4m3 only");
  const json* bs = qc.Get("weight_block_size");
  if (!bs)
    ThrowLoadError(qc.file, ": ", qc.Field("weight_block_size"),
                   " is missing: quant_method fp8 without block scales is not supported yet; ", kSupported);
  if (!bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() || !(*bs)[1].is_number_integer() ||
      (*bs)[0].get<int64_t>() <= 0 || (*bs)[1].get<int64_t>() <= 0)
    qc.Fail("weight_block_size", "must be two positive integers [block_n, block_k], got " + DescribeJson(*bs));
  out.block_n = (*bs)[0].get<int64_t>();
  out.block_k = (*bs)[1].get<int64_t>();
  out.method = QuantMethod::kFp8Block;
  out.format = "fp8";
  out.ignore = qc.StringList("modules_to_not_convert");
  for (const std::string& s : qc.StringList("ignored_layers")) out.ignore.push_back(s);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

bool QuantConfig::IsQuantized(std::string_view module_name) const {
  if (method == QuantMethod::kNone) return false;
  const std::string name(module_name);
  auto single = [&](const std::string& m) {
    if (format == "fp8") {  // transformers: an entry anywhere in the name excludes it
      for (const auto& p : ignore)
        if (m.find(p) != std::string::npos) return false;
      return true;
    }
    if (format == "modelopt" || format == "online") {
      for (const auto& p : ignore)
        if (ModelOptMatches(p, m)) return false;
      return true;
    }
    for (const auto& p : ignore)
      if (CtMatches(p, m)) return false;
    for (const auto& t : targets)
      if (t == "Linear" || CtMatches(t, m)) return true;
    return false;
  };
  // Merged projections: all shards must agree, as vLLM requires.
  struct Merge {
    std::string_view merged;
    std::vector<std::string_view> shards;
  };
  static const Merge kMerges[] = {{"qkv_proj", {"q_proj", "k_proj", "v_proj"}},
                                  {"gate_up_proj", {"gate_proj", "up_proj"}}};
  for (const auto& mg : kMerges) {
    if (!EndsWith(name, mg.merged) || !(name.size() == mg.merged.size() || name[name.size() - mg.merged.size() - 1] == '.'))
      continue;
    if (!single(name)) return false;
    const std::string base = name.substr(0, name.size() - mg.merged.size());
    const bool first = single(base + std::string(mg.shards[0]));
    for (const auto& s : mg.shards)
      if (single(base + std::string(s)) != first)
        ThrowLoadError(format, " quantization config: the shards of ", name,
                       " disagree on quantization (", base, mg.shards[0], ": ", first ? "FP8" : "not quantized",
                       ", ", base, s, ": ", first ? "not quantized" : "FP8", "); they cannot be merged");
    return first;
  }
  return single(name);
}

QuantConfig QuantConfig::FromDir(const std::string& dir) {
  QuantConfig out;
  const std::string config_path = JoinPath(dir, "config.json");
  const json config = ReadObject(config_path);
  const std::string hf_path = JoinPath(dir, "hf_quant_config.json");

  std::optional<std::vector<std::string>> modelopt_from_config, modelopt_from_hf;
  bool config_has_quant = false;
  const Node root{config_path, config, ""};
  if (root.Get("quantization_config")) {
    const Node qc = root.Child("quantization_config");
    config_has_quant = true;
    const std::string method = qc.RequiredString("quant_method");
    if (method == "modelopt") {
      // Some exports nest the hf_quant_config.json layout inside quantization_config.
      modelopt_from_config = ParseModelOpt(qc.Get("quantization") ? qc.Child("quantization") : qc);
      if (!modelopt_from_config) config_has_quant = false;
    } else if (method == "compressed-tensors") {
      ParseCompressedTensors(qc, out);
      out.format = "compressed-tensors";
    } else if (method == "fp8") {
      ParseBlockFp8(qc, out);
    } else {
      qc.Unsupported("quant_method", json(method));
    }
  }
  if (FileExists(hf_path)) {
    const json hf = ReadObject(hf_path);
    const Node hroot{hf_path, hf, ""};
    modelopt_from_hf = ParseModelOpt(hroot.Child("quantization"));
    if (modelopt_from_hf && !out.format.empty())
      ThrowLoadError(hf_path, ": says ModelOpt FP8 but ", config_path, " says quant_method ",
                     out.format, "; the checkpoint is ambiguous");
    if (!modelopt_from_hf && config_has_quant)
      ThrowLoadError(hf_path, ": quantization.quant_algo is null but ", config_path,
                     " declares a quantization_config; the checkpoint is ambiguous");
  }
  if (modelopt_from_config || modelopt_from_hf) {
    out.method = QuantMethod::kFp8Static;
    out.format = "modelopt";
    for (const auto* list : {&modelopt_from_config, &modelopt_from_hf})
      if (*list)
        for (const auto& p : **list)
          if (std::find(out.ignore.begin(), out.ignore.end(), p) == out.ignore.end()) out.ignore.push_back(p);
  }
  return out;
}

QuantConfig QuantConfig::Online() {
  QuantConfig q;
  q.method = QuantMethod::kFp8Online;
  q.format = "online";
  q.ignore = {"lm_head"};
  return q;
}

void CheckQuantizationFlag(const std::string& flag) {
  if (flag.empty() || flag == "fp8" || flag == "modelopt" || flag == "compressed-tensors") return;
  throw vt::Error(vt::StrCat("--quantization: \"", flag,
                             "\" is not supported (supported: fp8 (online FP8 of a BF16 checkpoint, or a block "
                             "FP8 checkpoint), modelopt, compressed-tensors)"));
}

QuantConfig ResolveQuantization(QuantConfig from_checkpoint, const std::string& flag, const std::string& dir) {
  CheckQuantizationFlag(flag);
  if (flag.empty()) return from_checkpoint;
  const bool quantized = from_checkpoint.method != QuantMethod::kNone;
  if (flag == "fp8") {
    if (!quantized) return QuantConfig::Online();
    if (from_checkpoint.format == "fp8") return from_checkpoint;  // quant_method fp8: the same method
    throw vt::Error(vt::StrCat("--quantization fp8: ", dir, " is already quantized (", from_checkpoint.format,
                               "); online FP8 needs an unquantized (BF16) checkpoint. Leave --quantization out "
                               "(or pass --quantization ", from_checkpoint.format, ") to load it as it is"));
  }
  if (!quantized)
    throw vt::Error(vt::StrCat("--quantization ", flag, ": ", dir,
                               " is not quantized (no quantization_config); use --quantization fp8 for online FP8"));
  if (from_checkpoint.format != flag)
    throw vt::Error(vt::StrCat("--quantization ", flag, ": ", dir, " is quantized as ", from_checkpoint.format,
                               ", not ", flag));
  return from_checkpoint;
}

}  // namespace vtllm::model
