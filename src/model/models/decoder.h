// The Llama-family decoder (Llama, Qwen2, Qwen3, Qwen3-MoE): embedding, N x [RMSNorm -> attention
// (q/k/v merged, RoPE, paged KV cache) -> RMSNorm -> SiLU-gated MLP (gate/up merged)] with a
// residual stream, a final RMSNorm and the lm_head. The architectures differ only in the
// options below.
#pragma once

#include <memory>
#include <vector>

#include "model/quant_config.h"
#include "vt/op_id.h"

#include "model/models/causal_lm.h"

namespace vtllm::model {

struct DecoderOptions {
  bool qk_norm = false;   // Qwen3: RMSNorm of each query and key head before RoPE
  bool qkv_bias = false;  // Qwen2 (always), Llama/Qwen3 with attention_bias
};

std::unique_ptr<CausalLM> MakeDecoder(const BuildContext& ctx, const DecoderOptions& options);

// The ops a decoder dispatches for a checkpoint of this quantization with `act` activations:
// the one list the load checks against the device's kernels before reading any weight.
std::vector<vt::OpId> DecoderOps(const QuantConfig& quant, vt::DType act);
// DecoderOps and the mixture-of-experts ops (Qwen3-MoE: config.num_experts > 0; each layer
// the config makes sparse has a SparseMoeBlock instead of the dense MLP).
std::vector<vt::OpId> MoeDecoderOps(const QuantConfig& quant, vt::DType act);

}  // namespace vtllm::model
