// `vtllm quantize`: static per-tensor FP8 W8A8 from a BF16 checkpoint, on a CPU.
//
//   1. calibration: the BF16 model runs the calibration windows with float32 activations,
//      each linear showing its input to an observer (LinearInputObserver) that keeps the
//      running max |x| per projection;
//   2. per projection P (every decoder linear; lm_head and the embeddings stay BF16):
//      P.input_scale = amax(input) / 448 and P.weight_scale = amax(P.weight) / 448 (f32),
//      P.weight = e4m3(w * (1 / weight_scale)) exactly as QuantFp8Static computes it. Merged
//      projections keep one scale per shard (q/k/v, gate/up), as ModelOpt writes them; a
//      loader merges them (vLLM: the max input scale, the weights requantized to the max);
//   3. a checkpoint in `format`:
//      - "modelopt": config.json quantization_config {quant_method: modelopt, quant_algo: FP8,
//        exclude_modules: [lm_head]} and hf_quant_config.json, scales as F32 scalars [];
//      - "compressed-tensors": quantization_config {quant_method: compressed-tensors, format:
//        float-quantized, config_groups: {group_0: {targets: [Linear], weights and
//        input_activations: float, 8 bits, strategy tensor, static}}, ignore: [lm_head]},
//        scales F32 [1];
//      with the other tensors copied as they are, and the tokenizer files and
//      generation_config.json copied;
//   4. with kv_cache_fp8, each attention layer's KV-cache scales for --kv-cache-dtype fp8:
//      k_scale = amax(keys) / 448 and v_scale = amax(values) / 448 over the calibration (the
//      keys after the q/k norm and RoPE, as the cache holds them), written as ModelOpt writes
//      them (`self_attn.k_proj.k_scale`, `v_proj.v_scale`, kv_cache_quant_algo FP8) or as
//      compressed-tensors does (`self_attn.k_scale`, `v_scale`, a kv_cache_scheme).
// A scale whose amax is 0 (an all-zero weight or an input never non-zero) is written as 1.
//
// Mixture-of-experts models: every routed expert's gate/up/down projections are written one
// tensor per expert (`...mlp.experts.E.gate_proj.weight`, also where the source stores them
// fused as `experts.gate_up_proj` / `experts.down_proj`) and quantized like linears, each with
// its input_scale = amax / 448 of the inputs of the calibration tokens routed to it (gate and
// up: the block's input rows; down: Silu(g) · u of those rows). An expert no calibration token
// reached takes the largest input scale of its block's calibrated experts of the same kind
// (gate/up, or down), which is the scale the static loaders (vtllm, vLLM) use for every expert
// of the block anyway; the report lists them. The routers (`mlp.gate`) and the shared
// experts' gates stay BF16 and are listed as excluded (`*.mlp.gate`, `re:.*mlp\.gate$`, and
// likewise `shared_expert_gate`); the shared experts' projections are linears.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace vtllm::model {

struct QuantizeOptions {
  std::string format = "modelopt";                // or "compressed-tensors"
  std::vector<std::vector<int32_t>> calibration;  // token windows, each run from position 0
  int cpu_threads = 0;                            // 0: one per hardware thread
  bool progress = true;                           // progress bars on stderr
  bool kv_cache_fp8 = false;                      // also calibrate and write k_scale / v_scale
};

struct QuantizeReport {
  std::map<std::string, float> input_amax;  // projection prefix -> max |input| seen
  std::map<std::string, float> weight_scale, input_scale;
  // kv_cache_fp8: attention prefix ("model.layers.0.self_attn.") -> max |key|, max |value|.
  std::map<std::string, std::pair<float, float>> kv_amax;
  // Routed-expert projections no calibration token reached (input_amax 0; their input_scale
  // is their block's largest of the same kind).
  std::vector<std::string> uncalibrated_experts;
  int64_t calibration_tokens = 0;
  uint64_t bytes_written = 0;  // model.safetensors
};

// The calibration alone: each decoder linear's input amax over `windows` (F32 activations on
// a CPU), by shard prefix ("model.layers.0.self_attn.q_proj"); lm_head is not included.
// With kv_amax, also each attention layer's max |key| and |value| as its cache holds them.
// MoE models: every routed expert's projections are included (amax 0 where no token reached
// the expert); with expert_tokens, also how many calibration tokens each expert projection saw.
std::map<std::string, float> CalibrateInputAmax(const std::string& model_dir,
                                                const std::vector<std::vector<int32_t>>& windows,
                                                int cpu_threads = 0, bool progress = false,
                                                std::map<std::string, std::pair<float, float>>* kv_amax = nullptr,
                                                std::map<std::string, int64_t>* expert_tokens = nullptr);

// Quantizes the BF16 checkpoint `model_dir` into `out_dir` (created; it must not exist or be
// empty). Throws vt::Error (LoadError for checkpoint defects) naming the file, tensor or flag:
// a quantized or non-BF16 checkpoint, an unknown format, no
// calibration tokens, an existing non-empty out_dir. On failure nothing is left in out_dir.
QuantizeReport QuantizeCheckpoint(const std::string& model_dir, const std::string& out_dir,
                                  const QuantizeOptions& options);

}  // namespace vtllm::model
