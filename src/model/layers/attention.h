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
};

class Attention {
 public:
  Attention() = default;
  // Loads `prefix`{q,k,v,o}_proj (and q_norm/k_norm with qk_norm), e.g. prefix
  // "model.layers.3.self_attn.".
  static Attention Load(const LinearContext& lc, const std::string& prefix, const AttentionShape& shape);

  // x: the layer's normed input (F8E4M3 when qkv() takes quantized input); rope_cache: the
  // cos/sin table; out: [T, H] in the activation dtype.
  void Forward(const vt::Queue& q, const vt::Tensor& x, const AttentionMetadata& meta, const vt::Tensor& key_cache,
               const vt::Tensor& value_cache, const vt::Tensor& rope_cache, const vt::Tensor& out,
               ActivationBuffers& buffers) const;

  const Linear& qkv() const { return qkv_; }
  int64_t weight_bytes() const;

 private:
  AttentionShape s_;
  float scale_ = 1.0f;
  vt::Tensor q_norm_, k_norm_;
  Linear qkv_, o_proj_;
};

}  // namespace vtllm::model
