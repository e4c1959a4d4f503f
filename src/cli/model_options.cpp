#include "cli/model_options.h"

#include <charconv>

#include "default_model/default_model.h"
#include "vt/error.h"

namespace vtllm::cli {

void AddModelFlags(CLI::App* cmd, ModelArgs& args) {
  cmd->add_option("--device", args.device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", args.dtype, "activation dtype: auto, bfloat16 or float32")->capture_default_str();
  cmd->add_option("--threads", args.threads, "CPU threads (0: one per hardware thread)")->capture_default_str();
  cmd->add_option("--cpu-isa", args.cpu_isa,
                  "highest CPU kernel level to use: scalar, then avx2, avx512, avx512bf16, amx (x86-64) or "
                  "neon, neonbf16 (aarch64), or best (what the processor has)")
      ->capture_default_str();
  cmd->add_flag("--enforce-eager", args.enforce_eager,
                "CUDA: run every step eagerly, not decode steps as replays of recorded CUDA graphs");
  cmd->add_option("--quantization,-q", args.quantization,
                  "fp8: quantize a BF16 checkpoint's linears to FP8 at load (per-tensor weights, dynamic "
                  "per-token activations); modelopt or compressed-tensors: require that layout. Default: "
                  "the checkpoint's own");
  cmd->add_option("--kv-cache-dtype", args.kv_cache_dtype,
                  "KV cache dtype: auto (the activation dtype), fp8 or fp8_e4m3 (keys and values stored as "
                  "e4m3 divided by each layer's k_scale / v_scale from the checkpoint, else 1)")
      ->capture_default_str();
  cmd->add_option("--tensor-parallel-size", args.tensor_parallel_size,
                  "split the model over this many ranks (tensor parallelism): CUDA devices from --device's "
                  "index on, or threads of this process on CPU (docs/tensor_parallel.md)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  auto* on = cmd->add_flag("--async-scheduling", args.async_scheduling,
                           "schedule and launch each step before the one before it has returned its tokens (the "
                           "default with CUDA; docs/architecture.md)");
  auto* off = cmd->add_flag("--no-async-scheduling", args.no_async_scheduling,
                            "wait for each step's tokens before scheduling the next (the default on CPU)");
  on->excludes(off);
}

std::optional<bool> AsyncSchedulingFor(const ModelArgs& args) {
  if (args.async_scheduling) return true;
  if (args.no_async_scheduling) return false;
  return std::nullopt;
}

namespace {
vt::Device ParseDevice(const std::string& s) {
  if (s == "cpu") return vt::Device::Cpu();
  if (s == "cuda") return vt::Device::Cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    int index = -1;
    const char* b = s.data() + 5;
    const char* e = s.data() + s.size();
    auto [p, ec] = std::from_chars(b, e, index);
    if (ec == std::errc() && p == e && index >= 0) return vt::Device::Cuda(index);
  }
  throw vt::Error(vt::StrCat("--device: \"", s, "\" is not cpu, cuda or cuda:N"));
}

// The levels of this build (vt::CpuIsaLevels: scalar, avx2, avx512, avx512bf16, amx on x86-64;
// scalar, neon, neonbf16 on aarch64), so that the error names what is valid here.
vt::CpuIsa ParseCpuIsa(const std::string& s) {
  if (s == "best") return vt::CpuIsa::kBest;
  std::string valid;
  for (vt::CpuIsa isa : vt::CpuIsaLevels()) {
    if (s == vt::CpuIsaName(isa)) return isa;
    valid += vt::StrCat(vt::CpuIsaName(isa), ", ");
  }
  throw vt::Error(vt::StrCat("--cpu-isa: \"", s, "\" is not a CPU kernel level of this build (", valid, "best)"));
}

std::optional<vt::DType> ParseDType(const std::string& s) {
  if (s == "auto") return std::nullopt;
  if (s == "bfloat16" || s == "bf16") return vt::DType::kBF16;
  if (s == "float32" || s == "f32" || s == "float") return vt::DType::kF32;
  throw vt::Error(vt::StrCat("--dtype: \"", s, "\" is not auto, bfloat16 or float32"));
}
}  // namespace

model::LoadOptions LoadOptionsFor(const ModelArgs& args, bool progress) {
  model::LoadOptions o;
  o.device = ParseDevice(args.device);
  o.dtype = ParseDType(args.dtype);
  o.cpu_threads = args.threads;
  o.cpu_isa = ParseCpuIsa(args.cpu_isa);
  o.progress = progress;
  o.enforce_eager = args.enforce_eager;
  model::CheckQuantizationFlag(args.quantization);
  o.quantization = args.quantization;
  model::ParseKvCacheDtype(args.kv_cache_dtype);  // a bad value fails before anything loads
  o.kv_cache_dtype = args.kv_cache_dtype;
  o.tensor_parallel_size = args.tensor_parallel_size;
  return o;
}

std::string ModelDir(const ModelArgs& args) { return args.model.empty() ? DefaultModelDir() : args.model; }

std::unique_ptr<model::Model> LoadModel(const ModelArgs& args, bool progress) {
  return model::Model::Load(ModelDir(args), LoadOptionsFor(args, progress));
}

std::vector<int32_t> ParsePromptIds(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    int64_t v = -1;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    VT_CHECK(!item.empty() && ec == std::errc() && p == item.data() + item.size() && v >= 0 && v <= INT32_MAX,
             "--prompt-ids: entry ", ids.size(), " (\"", item, "\") is not a non-negative integer token id");
    ids.push_back(static_cast<int32_t>(v));
    start = end + 1;
  }
  VT_CHECK(!ids.empty(), "--prompt-ids: no token ids");
  return ids;
}

}  // namespace vtllm::cli
