// Hybrid Gated DeltaNet decoders (Qwen3NextForCausalLM, Qwen3_5ForCausalLM and the text model
// of Qwen3_5ForConditionalGeneration): embedding, N x [zero-centred RMSNorm -> token mixer ->
// zero-centred RMSNorm -> MLP] with a residual stream, a final zero-centred RMSNorm and the
// lm_head. The token mixer of layer i is a GatedDeltaNet when config.layer_types[i] is
// "linear_attention", else GatedAttention over the paged KV cache; the MLP is a
// SparseMoeBlock (with its gated shared expert) where the config makes the layer sparse,
// else a dense SwiGLU MLP. Zero-centred RMSNorm: x_hat * (1 + w) (HF's Qwen3NextRMSNorm).
//
// Weights under model.language_model.* when the checkpoint has them there (the multimodal
// wrapper's layout), else model.*; model.visual.* and mtp.* (the multi-token-prediction
// head) are not read. The KV cache spec counts the full-attention layers only; the
// recurrent layers keep their state in slots (StateCacheSpec).
#pragma once

#include <memory>
#include <vector>

#include "model/models/causal_lm.h"
#include "model/quant_config.h"
#include "vt/op_id.h"

namespace vtllm::model {

std::unique_ptr<CausalLM> MakeHybridDecoder(const BuildContext& ctx);
std::vector<vt::OpId> HybridDecoderOps(const QuantConfig& quant, vt::DType act);

}  // namespace vtllm::model
