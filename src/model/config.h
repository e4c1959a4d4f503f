// config.json -> ModelConfig and generation_config.json -> GenerationConfig.
//
// Both config spellings are accepted: the older one (top-level `rope_theta`, `rope_scaling`,
// `torch_dtype`) and transformers 5's (`rope_parameters.{rope_theta, rope_type, ...}`,
// `dtype`). A missing or ill-typed required field throws LoadError naming config.json and
// the field with its actual value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vt/dtype.h"

namespace vtllm::model {

struct RopeScaling {
  std::string type = "default";  // "default" or "llama3"; others are refused on load
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};

struct ModelConfig {
  std::string architecture;  // architectures[0], e.g. "Qwen3ForCausalLM"
  std::string model_type;    // "qwen3", "qwen2", "llama", ...
  int64_t hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0, num_attention_heads = 0,
          num_key_value_heads = 0, head_dim = 0, vocab_size = 0, max_position_embeddings = 0;
  double rms_norm_eps = 1e-6, rope_theta = 10000.0;  // rope_theta or rope_parameters.rope_theta
  RopeScaling rope_scaling;                          // rope_scaling or rope_parameters
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // attention_bias; always true for model_type qwen2 (q/k/v bias)
  std::string hidden_act = "silu";
  vt::DType dtype = vt::DType::kF32;  // torch_dtype or dtype; float32 when absent, as in HF
  std::vector<int64_t> eos_token_ids;  // eos_token_id: int, list or null
  int64_t bos_token_id = -1;           // -1 when absent or null

  // Mixture of experts (Qwen3MoeForCausalLM; num_experts == 0 for a dense model). A layer i
  // is sparse when i is not in mlp_only_layers, num_experts > 0 and (i + 1) %
  // decoder_sparse_step == 0, as HF's Qwen3MoeDecoderLayer decides; a dense layer among
  // sparse ones has an MLP of intermediate_size.
  int64_t num_experts = 0;            // num_experts (or Mixtral's spelling num_local_experts)
  int64_t num_experts_per_tok = 0;    // top-k
  int64_t moe_intermediate_size = 0;  // each expert's SwiGLU width
  int64_t shared_expert_intermediate_size = 0;  // Qwen2-MoE's shared expert (0: none)
  bool norm_topk_prob = false;        // renormalise the top-k routing weights to sum to 1
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  bool IsSparseLayer(int64_t layer) const;

  // Hybrid models (Qwen3NextForCausalLM, Qwen3_5ForCausalLM): Gated DeltaNet
  // ("linear_attention") layers among full-attention ones. layer_types has one entry per
  // layer, from config.json's layer_types or, without it, from full_attention_interval (layer
  // i is full attention iff (i + 1) % interval == 0, HF's rule); empty for other models.
  std::vector<std::string> layer_types;
  int64_t linear_conv_kernel_dim = 0, linear_key_head_dim = 0, linear_value_head_dim = 0,
          linear_num_key_heads = 0, linear_num_value_heads = 0;
  // RoPE rotates the first partial_rotary_factor * head_dim dims of each head (top-level or
  // in rope_parameters; 1 when absent).
  double partial_rotary_factor = 1.0;
  bool attn_output_gate = false;  // q_proj gives [q | gate] per head; output *= sigmoid(gate)
  // The text model's fields came from config.json's text_config (a multimodal wrapper such
  // as Qwen3_5ForConditionalGeneration); its weights are under model.language_model.
  bool nested_text_config = false;
  bool IsHybrid() const { return !layer_types.empty(); }
  bool IsLinearAttentionLayer(int64_t layer) const {
    return IsHybrid() && layer_types[static_cast<size_t>(layer)] == "linear_attention";
  }

  // Reads DIR/config.json.
  static ModelConfig FromDir(const std::string& dir);
  static ModelConfig FromFile(const std::string& config_json_path);
};

// Sampling defaults from generation_config.json (all defaults when the file is absent),
// read the way vLLM reads them (do_sample is not consulted).
struct GenerationConfig {
  double temperature = 1.0, top_p = 1.0, min_p = 0.0, repetition_penalty = 1.0;
  int64_t top_k = 0;  // 0: disabled
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id = -1;

  static GenerationConfig FromDir(const std::string& dir);
};

// "bfloat16"/"float16"/"float32"/... -> dtype; nullopt-like failure throws naming `where`.
vt::DType ParseTorchDType(const std::string& name, const std::string& where);

}  // namespace vtllm::model
