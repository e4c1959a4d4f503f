// Self-attention of one decoder layer over the paged KV cache:
//   x [T, H] -> q/k/v (one merged linear) -> per-head RMSNorm of q and k (Qwen3) -> RoPE
//   -> keys and values written to the layer's cache slots -> paged attention [T, Hq*D]
//   -> o_proj -> out [T, H].
#pragma once

#include <string>

#include "model/layers/activation_buffers.h"
#include "model/layers/linear.h"
#include "model/models/causal_lm.h"

namespace vtllm::model {

struct AttentionShape {
  int64_t hidden = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  bool qk_norm = false, qkv_bias = false;
  float rms_eps = 1e-6f;
  bool fp8_kv_cache = false;  // --kv-cache-dtype fp8: the layer's k_scale / v_scale are loaded
};

// The scales of a layer's FP8 KV cache (vt/ops/attention.h): x is stored as x / scale.
struct KvCacheScales {
  float k = 1.0f, v = 1.0f;
};

// A layer's KV-cache scales from the checkpoint, `prefix` its attention ("model.layers.3.
// self_attn."): k from `k_scale`, `k_proj.k_scale` (ModelOpt) or `k_proj.output_scale`
// (older compressed-tensors), v likewise; 1 where the checkpoint has none, as vLLM's loader
// does. A scale of another shape than [] / [1], not finite or <= 0, or given under two of
// the spellings, is a LoadError naming the tensor.
KvCacheScales LoadKvCacheScales(const Checkpoint& ckpt, const std::string& prefix);

// vLLM's QKVParallelLinear: rank r of N keeps query heads [r*Hq/N, (r+1)*Hq/N) and KV heads
// [r*Hk/N, (r+1)*Hk/N), or, with fewer KV heads than ranks, the one KV head its query heads
// read (head r / (N/Hk), replicated on N/Hk ranks). Requires N | Hq, and N | Hk or Hk | N
// (vt::Error otherwise; the model's load checks first with a LoadError).
struct AttentionHeads {
  int64_t q_first = 0, num_q = 0, kv_first = 0, num_kv = 0;
};
AttentionHeads ShardHeads(int64_t num_heads, int64_t num_kv_heads, const TensorParallel& tp);

class Attention {
 public:
  Attention() = default;
  // Loads `prefix`{q,k,v,o}_proj (and q_norm/k_norm with qk_norm), e.g. prefix
  // "model.layers.3.self_attn.". With tensor parallelism (tp.size > 1), `shape` is the whole
  // layer's and this rank keeps its heads (AttentionHeads); o_proj is then row-parallel and
  // `out` of Forward is this rank's part of the sum the caller all-reduces.
  static Attention Load(const LinearContext& lc, const std::string& prefix, const AttentionShape& shape,
                        const TensorParallel& tp = {});

  // x: the layer's normed input (F8E4M3 when qkv() takes quantized input, or quantized per
  // token group as qkv().input_group_quant() says, with its scales); rope_cache: the
  // cos/sin table; out: [T, H] in the activation dtype. fuse_quant (BF16 activations): a
  // static-FP8 o_proj's input is quantized by the attention op (PagedAttentionQuantFp8,
  // where the device has it) instead of by o_proj.
  void Forward(const vt::Queue& q, const LinearInput& x, const AttentionMetadata& meta, const vt::Tensor& key_cache,
               const vt::Tensor& value_cache, const vt::Tensor& rope_cache, const vt::Tensor& out,
               ActivationBuffers& buffers, bool fuse_quant = false) const;

  const Linear& qkv() const { return qkv_; }
  int64_t weight_bytes() const;

 private:
  AttentionShape s_;
  float scale_ = 1.0f;
  KvCacheScales kv_scales_;
  vt::Tensor q_norm_, k_norm_;
  Linear qkv_, o_proj_;
};

}  // namespace vtllm::model
