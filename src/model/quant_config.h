// Quantization detection: which weights of a checkpoint are static per-tensor FP8 W8A8.
//
// Two spellings carry the same math (DESIGN.md, "Checkpoints"):
// - ModelOpt: config.json quantization_config {quant_method: "modelopt", quant_algo: "FP8",
//   exclude_modules: [...]} and/or hf_quant_config.json {quantization: {quant_algo: "FP8",
//   exclude_modules: [...]}}. Exclusions are names or "*" globs; one that matches a module
//   or any dotted parent of it ("model.layers.*.mlp") keeps that module in high precision.
// - compressed-tensors: quantization_config {quant_method: "compressed-tensors",
//   format: "float-quantized"|"naive-quantized", config_groups: {NAME: {targets, weights,
//   input_activations}}, ignore: [...]}, where weights and input_activations are both
//   {type: "float", num_bits: 8, strategy: "tensor", dynamic: false}. `targets` and `ignore`
//   hold "Linear", exact module names or "re:" regexes (matched from the start of the name).
// Anything else (another method, algorithm, strategy, dynamic activations, ...) throws a
// LoadError that names it as not supported yet.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vtllm::model {

enum class QuantMethod { kNone, kFp8Static };

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  std::string format;               // "modelopt" or "compressed-tensors" (empty when none)
  std::vector<std::string> ignore;  // exclude_modules / ignore, as written
  std::vector<std::string> targets; // compressed-tensors targets ("Linear", names, "re:" regexes)

  // Whether the linear module `module_name` (e.g. "model.layers.0.self_attn.q_proj") holds
  // FP8 weights. A merged name ("...qkv_proj", "...gate_up_proj") asks about its shards,
  // which must agree, as vLLM requires.
  bool IsQuantized(std::string_view module_name) const;

  // Reads DIR/config.json (quantization_config) and DIR/hf_quant_config.json if present.
  static QuantConfig FromDir(const std::string& dir);
};

}  // namespace vtllm::model
