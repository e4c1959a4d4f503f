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
// Dynamic-activation FP8 (quantized per token at run time, vLLM's semantics):
// - Block FP8 (the official Qwen/Qwen3-*-FP8 and DeepSeek releases): quantization_config
//   {quant_method: "fp8", activation_scheme: "dynamic", weight_block_size: [bn, bk],
//   modules_to_not_convert / ignored_layers: [...]}; per linear `weight` F8_E4M3 [N, K] and
//   `weight_scale_inv` [ceil(N/bn), ceil(K/bk)] (F32 or BF16). A module is excluded when an
//   entry is a substring of its name (transformers' rule).
// - compressed-tensors with weights {strategy: "channel", dynamic: false} and
//   input_activations {strategy: "token", dynamic: true}: `weight` F8_E4M3 [N, K] and
//   `weight_scale` [N, 1].
// Anything else (another method, algorithm, strategy, static block scales, ...) throws a
// LoadError that names it as not supported yet.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vtllm::model {

enum class QuantMethod {
  kNone,
  kFp8Static,        // per-tensor weight and input scales from the checkpoint
  kFp8Block,         // block-scaled weights, activations per token and block_k columns
  kFp8ChannelToken,  // per-output-channel weight scales, activations per token
  kFp8Online,        // `--quantization fp8` on a BF16 checkpoint: weights quantized per tensor
                     // at load (one scale per merged weight), activations per token
};

// Whether the method keeps FP8 weights (every method but kNone).
inline bool IsFp8(QuantMethod m) { return m != QuantMethod::kNone; }

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  std::string format;               // "modelopt" or "compressed-tensors" (empty when none)
  std::vector<std::string> ignore;  // exclude_modules / ignore, as written
  std::vector<std::string> targets; // compressed-tensors targets ("Linear", names, "re:" regexes)
  int64_t block_n = 0, block_k = 0; // kFp8Block: weight_block_size

  // Whether the linear module `module_name` (e.g. "model.layers.0.self_attn.q_proj") holds
  // FP8 weights. A merged name ("...qkv_proj", "...gate_up_proj") asks about its shards,
  // which must agree, as vLLM requires.
  bool IsQuantized(std::string_view module_name) const;

  // Reads DIR/config.json (quantization_config) and DIR/hf_quant_config.json if present.
  static QuantConfig FromDir(const std::string& dir);

  // Online FP8 (vLLM's `--quantization fp8` on an unquantized checkpoint): every linear but
  // lm_head (the embeddings and norms are not linears and stay as stored).
  static QuantConfig Online();
};

// The quantization a model loads with, given the checkpoint's own (`from_checkpoint`, read
// from `dir`) and the `--quantization` value (vLLM's flag; "" = the checkpoint's):
// - "fp8": online FP8 of an unquantized checkpoint, or a checkpoint whose quant_method is
//   fp8 (block FP8) as it is;
// - "modelopt", "compressed-tensors": the checkpoint must be quantized in that layout.
// Any other value, or one that contradicts the checkpoint, throws vt::Error naming the flag.
QuantConfig ResolveQuantization(QuantConfig from_checkpoint, const std::string& flag, const std::string& dir);
// Throws vt::Error naming --quantization unless `flag` is "" or one of the values above.
void CheckQuantizationFlag(const std::string& flag);

}  // namespace vtllm::model
