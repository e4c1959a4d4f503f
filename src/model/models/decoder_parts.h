// What the decoder-only architectures (decoder.cpp: Llama, Qwen2, Qwen3, their MoE variants;
// hybrid.cpp: Qwen3-Next, Qwen3.5) share: the ops their linear and MoE layers dispatch, a
// layer's feed-forward block, the embedding and lm_head loaders, the full-attention KV cache
// spec and the logits head.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "model/layers/activation_buffers.h"
#include "model/layers/linear.h"
#include "model/layers/mlp.h"
#include "model/layers/moe.h"
#include "model/models/causal_lm.h"
#include "model/quant_config.h"
#include "vt/op_id.h"

namespace vtllm::model {

// The ops a Linear dispatches for checkpoints of this quantization: Matmul, and the FP8
// quantizers and GEMMs of its method.
std::vector<vt::OpId> LinearOps(const QuantConfig& quant);
// The ops of a SparseMoeBlock: the router, the experts (FP8 ones for static FP8) and the
// shared expert's sigmoid gate.
std::vector<vt::OpId> MoeBlockOps(const QuantConfig& quant);
// The fused norm/activation + per-token-group FP8 recipes that a block, per-channel/per-token
// or online FP8 model (BF16 activations) runs where the device has them: optional, so not in
// the lists above that the load requires; without a kernel the model runs the steps apart
// (the same bytes).
std::vector<vt::OpId> FusedGroupQuantOps(const QuantConfig& quant, vt::DType act);

// A layer's feed-forward block: a SparseMoeBlock where the config makes layer `layer`
// sparse (ModelConfig::IsSparseLayer), else a dense SiLU-gated MLP.
struct FeedForward {
  bool sparse = false;
  GatedMlp mlp;
  SparseMoeBlock moe;

  // Loads `prefix` (e.g. "model.layers.3.mlp."), this rank's shard of it: a dense MLP's block
  // of the intermediate size, or a sparse block's block of each expert's (SparseMoeBlock).
  // Either way Forward's `out` is this rank's part of the sum the caller all-reduces.
  static FeedForward Load(const LinearContext& lc, const std::string& prefix, const ModelConfig& cfg, int64_t layer,
                          const TensorParallel& tp = {});
  // x: the normed input (for a dense MLP F8E4M3 when its gate_up takes quantized input, or
  // quantized per token group as its gate_up's input_group_quant() says); fuse_quant is the
  // dense MLP's (GatedMlp::Forward); out: [T, H].
  void Forward(const vt::Queue& q, const LinearInput& x, const vt::Tensor& out, bool fuse_quant,
               ActivationBuffers& buffers) const;
  // What one token reads: a MoE block's router and top-k experts, or the whole MLP.
  int64_t weight_bytes() const { return sparse ? moe.active_weight_bytes() : mlp.weight_bytes(); }
};

// RMSNorm of x [T, H] (after adding it to `residual` when given; zero_centred:
// RmsNormZeroCentred) into `normed`, fused with the FP8 quantization of a consumer's input:
// input_scale set -> the static recipe into the x8 buffer; else g set (and the device has the
// recipe) -> the PerTokenGroup recipe into x8 and its scales; neither -> the norm alone.
// normed_too: a fused op also writes the BF16 norm there. Returns the consumer's input
// (`normed` when nothing was fused).
LinearInput NormForInput(const vt::Queue& q, const vt::Tensor& x, const vt::Tensor& weight, float eps,
                         bool zero_centred, const vt::Tensor* residual, const vt::Tensor& normed,
                         std::optional<float> input_scale, std::optional<Fp8GroupQuant> g,
                         const vt::Tensor* normed_too, ActivationBuffers& buffers);
// RMSNorm of x [T, H] (after adding it to `residual` when given; zero_centred:
// RmsNormZeroCentred, Qwen3-Next's and Qwen3.5's) as the input of `next`: fused with the FP8
// quantization when `fuse_quant` and `next` takes FP8 input (static: the QuantFp8 recipe) or
// quantizes its input per token group (block, per-channel: the PerTokenGroup recipe, where
// the device has it); else into `normed` (and `next` quantizes it).
LinearInput NormForLinear(const vt::Queue& q, const Linear& next, const vt::Tensor& x, const vt::Tensor& weight,
                          float eps, bool zero_centred, const vt::Tensor* residual, const vt::Tensor& normed,
                          bool fuse_quant, ActivationBuffers& buffers);
// The norm ahead of a feed-forward block (as NormForLinear's), then the block into out [T, H].
// A dense MLP takes NormForLinear of its gate_up. A sparse block always gets the norm in
// `normed` (its router's and shared expert's input); where its experts take FP8 input
// (static, or per token group where the device has the recipe) the same op also writes
// their quantized input.
void NormThenFeedForward(const vt::Queue& q, const FeedForward& ff, const vt::Tensor& x, const vt::Tensor& weight,
                         float eps, bool zero_centred, const vt::Tensor* residual, const vt::Tensor& normed,
                         const vt::Tensor& out, bool fuse_quant, ActivationBuffers& buffers);

// `root` + "embed_tokens.weight" [V, H] on the device, advancing ctx.progress by its bytes.
// With tensor parallelism (ctx.tp.size > 1) it is vocabulary-parallel: this rank's V / size
// rows and a zero row after them, [V / size + 1, H], looked up with VocabShardIds' ids; the
// ranks' lookups (one of them the token's row, the others zeros) are then all-reduced.
vt::Tensor LoadEmbedding(const BuildContext& ctx, const std::string& root);
// Token ids as rank tp.rank's vocabulary-parallel embedding takes them: an id among its rows
// [r*V/N, (r+1)*V/N) becomes its row, any other the zero row V/N (vLLM's masked lookup).
void VocabShardIds(std::span<int32_t> ids, int64_t vocab, const TensorParallel& tp);
// The lm_head [V, H]: `root` + "embed_tokens" when the embedding is tied (the config says so
// or the checkpoint has no lm_head.weight), else "lm_head"; unquantized unless the checkpoint
// stores lm_head.weight in FP8. Advances ctx.progress by lm_head's bytes and by those of
// `root` + "norm.weight" (the final norm, which the caller loads). With tensor parallelism
// (ctx.tp.size > 1) it is vocabulary-parallel: this rank's vocab / size rows.
Linear LoadLmHead(const BuildContext& ctx, const std::string& root);

// A step's residual stream, [T, H] each in the activation buffers: `residual` holds the
// embeddings, then the running sum; `hidden` each layer's output; `normed` a norm's output;
// `mixed` the token mixer's (attention's) output.
struct ResidualStream {
  vt::Tensor residual, hidden, normed, mixed;
  ResidualStream(ActivationBuffers& buffers, int64_t T, int64_t H, vt::DType act);
  // Layer l's input to its first norm: layer 0 normalises the embeddings; later layers
  // first add their input (the previous layer's output) to the residual (AddTo).
  const vt::Tensor& Input(size_t l) const { return l == 0 ? residual : hidden; }
  const vt::Tensor* AddTo(size_t l) const { return l == 0 ? nullptr : &residual; }
};

// The paged KV cache of `num_layers` full-attention layers.
KvCacheSpec AttentionCacheSpec(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t num_blocks,
                               int64_t block_size, vt::DType dtype, vt::Device device);

// The logits of the wanted rows: normed [T, H] (the final norm's output), logit_rows [R] I32
// or undefined for all T rows; logits [R, V] F32. With `comm` (a vocabulary-parallel
// lm_head) each rank computes its vocabulary columns and an all-gather puts them side by side.
void ApplyLmHead(const vt::Queue& q, const Linear& lm_head, const vt::Tensor& normed, const vt::Tensor& logit_rows,
                 const vt::Tensor& logits, ActivationBuffers& buffers, vt::Communicator* comm = nullptr);

}  // namespace vtllm::model
