// The full-attention layers of hybrid models (HF's Qwen3NextAttention / Qwen3_5Attention):
//   x [T, H] -> q_proj gives [q_h | gate_h] per head (2*D rows per head; without an output
//   gate just q_h), k_proj, v_proj -> zero-centred RMSNorm of each q and k head
//   (x_hat * (1 + w)) -> RoPE on the first R = partial_rotary_factor * D dims of each head
//   -> paged attention -> * sigmoid(gate) -> o_proj -> [T, H].
//
// Partial rotary on vt's whole-head neox RotaryEmbedding: at load, the rows of q_proj and
// k_proj (and the q/k norm weights) are permuted within each head so that rotary pair
// (i, R/2 + i), i < R/2, lands on the neox pair (i, D/2 + i) and the D - R pass-through dims
// fill the other pairs, whose cache entries are cos 1, sin 0 (an exact identity). Scores
// q.k are unchanged by a permutation applied to both; values are not permuted. The
// keys in the KV cache are kept in that permuted order.
#pragma once

#include <string>

#include "model/layers/activation_buffers.h"
#include "model/layers/attention.h"  // KvCacheScales
#include "model/layers/linear.h"
#include "model/models/causal_lm.h"

namespace vtllm::model {

struct GatedAttentionShape {
  int64_t hidden = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t rotary_dim = 0;   // R: even, <= head_dim
  bool output_gate = true;  // q_proj holds a gate per head
  float rms_eps = 1e-6f;
  bool fp8_kv_cache = false;  // --kv-cache-dtype fp8: the layer's k_scale / v_scale are loaded
};

class GatedAttention {
 public:
  GatedAttention() = default;
  // Loads `prefix`{q,k,v,o}_proj and {q,k}_norm.weight, e.g. "model.layers.3.self_attn.".
  static GatedAttention Load(const LinearContext& lc, const std::string& prefix, const GatedAttentionShape& shape);

  // The cos/sin cache this layer's permuted heads expect: [max_positions, D] F32, pair i < R/2
  // at angle p * theta^(-2i/R), the others cos 1, sin 0.
  static vt::Tensor BuildRopeCache(const GatedAttentionShape& shape, double theta, int64_t max_positions,
                                   vt::Device device);

  // x_quantized: x already quantized as input_quant() says (e.g. by the fused RMSNorm that
  // made x; x is then not read); without it q, k, v and the gate share one quantization of x
  // whenever input_quant() has one.
  void Forward(const vt::Queue& q, const vt::Tensor& x, const AttentionMetadata& meta, const vt::Tensor& key_cache,
               const vt::Tensor& value_cache, const vt::Tensor& rope_cache, const vt::Tensor& out,
               ActivationBuffers& buffers, const LinearInput* x_quantized = nullptr) const;
  // The FP8 input quantization q, k, v (and the output gate's rows of q_proj) all take.
  SharedInputQuant input_quant() const;

  int64_t weight_bytes() const;

 private:
  GatedAttentionShape s_;
  float scale_ = 1.0f;
  KvCacheScales kv_scales_;
  vt::Tensor q_norm_, k_norm_;  // 1 + w, permuted, F32
  Linear q_, gate_, k_, v_, o_proj_;
};

}  // namespace vtllm::model
