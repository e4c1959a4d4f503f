// vtllm quantize MODEL --out DIR [--format modelopt|compressed-tensors] [--calibration-file TEXT]
//                [--calibration-tokens N] [--threads N]
// Static per-tensor FP8 W8A8 from a BF16 checkpoint on the CPU (model/quantize.h): the
// calibration text (default: a built-in one) is tokenized without special tokens and cut
// into windows of min(512, max_position_embeddings) tokens, at most --calibration-tokens in
// all; the BF16 model runs them in float32, collecting each linear's input amax.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/calibration_text.h"
#include "cli/commands.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/quantize.h"
#include "tokenizer/tokenizer.h"
#include "vt/error.h"

namespace vtllm::cli {

void AddQuantizeCommand(CLI::App& app) {
  struct Args {
    std::string model, out, format = "modelopt", calibration_file;
    int64_t calibration_tokens = 8192;
    int threads = 0;
    std::string kv_cache_dtype = "auto";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("quantize", "Static per-tensor FP8 W8A8 checkpoint from a BF16 one, calibrated on the CPU");
  cmd->add_option("MODEL", args->model, "BF16 checkpoint directory")->required();
  cmd->add_option("--out", args->out, "output directory (new or empty)")->required();
  cmd->add_option("--format", args->format, "checkpoint layout: modelopt or compressed-tensors")->capture_default_str();
  cmd->add_option("--calibration-file", args->calibration_file,
                  "UTF-8 text to calibrate the activation scales on (default: a built-in English text)");
  cmd->add_option("--calibration-tokens", args->calibration_tokens, "at most this many calibration tokens")
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads (0: one per hardware thread)")->capture_default_str();
  cmd->add_option("--kv-cache-dtype", args->kv_cache_dtype,
                  "fp8: also calibrate each attention layer's k_scale / v_scale (amax / 448) for an FP8 KV "
                  "cache; auto: none")
      ->capture_default_str();
  cmd->callback([args] {
    const bool kv_fp8 = model::ParseKvCacheDtype(args->kv_cache_dtype).has_value();
    VT_CHECK(args->format == "modelopt" || args->format == "compressed-tensors", "quantize: --format \"",
             args->format, "\" is not modelopt or compressed-tensors");
    VT_CHECK(args->calibration_tokens > 0, "quantize: --calibration-tokens must be > 0, got ",
             args->calibration_tokens);
    std::string text;
    if (args->calibration_file.empty()) {
      text = BuiltinCalibrationText();
    } else {
      std::ifstream f(args->calibration_file, std::ios::binary);
      VT_CHECK(f.good(), "quantize: cannot open --calibration-file \"", args->calibration_file, "\"");
      std::stringstream ss;
      ss << f.rdbuf();
      text = ss.str();
    }
    const model::ModelConfig cfg = model::ModelConfig::FromDir(args->model);
    const Tokenizer tok = Tokenizer::FromDir(args->model);
    const std::vector<int32_t> ids = tok.Encode(text, /*add_special_tokens=*/false);
    VT_CHECK(!ids.empty(), "quantize: the calibration text",
             args->calibration_file.empty() ? "" : " in " + args->calibration_file, " has no tokens");
    const int64_t W = std::min<int64_t>(512, cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : 512);
    const int64_t n = std::min<int64_t>(args->calibration_tokens, static_cast<int64_t>(ids.size()));
    model::QuantizeOptions o;
    o.format = args->format;
    o.cpu_threads = args->threads;
    o.kv_cache_fp8 = kv_fp8;
    for (int64_t s = 0; s < n; s += W)
      o.calibration.emplace_back(ids.begin() + s, ids.begin() + std::min(s + W, n));
    const model::QuantizeReport r = model::QuantizeCheckpoint(args->model, args->out, o);
    std::printf("wrote %s: %s FP8 W8A8, %zu linears quantized%s, calibrated on %lld tokens in %zu windows, "
                "%.1f MB of weights\n",
                args->out.c_str(), args->format.c_str(), r.weight_scale.size(),
                kv_fp8 ? vt::StrCat(", KV-cache scales of ", r.kv_amax.size(), " layers").c_str() : "",
                static_cast<long long>(r.calibration_tokens), o.calibration.size(),
                static_cast<double>(r.bytes_written) / 1e6);
    if (!r.uncalibrated_experts.empty())
      std::printf("%zu expert projections saw no calibration token (first: %s); each took the largest input scale "
                  "of its layer's experts of the same kind\n",
                  r.uncalibrated_experts.size(), r.uncalibrated_experts.front().c_str());
  });
}

}  // namespace vtllm::cli
