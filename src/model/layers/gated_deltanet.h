// The Gated DeltaNet token mixer of a hybrid model's linear-attention layers (HF's
// Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet), over a flattened batch with one recurrent
// state slot per sequence:
//   x [T, H] -> q [T, nk*dk], k [T, nk*dk], v [T, nv*dv], z [T, nv*dv], b, a [T, nv]
//   -> causal depthwise conv1d + SiLU over q, k and v (each with its channels' conv state)
//   -> the gated delta rule (l2-normalised q/k, g = -exp(A_log) softplus(a + dt_bias),
//      beta = sigmoid(b), value head h reads key head h / (nv / nk)) -> core [T, nv, dv]
//   -> RMSNorm over dv times weight (not zero-centred) times silu(z) -> out_proj -> [T, H].
//
// Checkpoint names under `prefix` (e.g. "model.layers.0.linear_attn."): Qwen3.5's split
// projections in_proj_qkv ([q | k | v] rows), in_proj_z, in_proj_b, in_proj_a; or
// Qwen3-Next's fused in_proj_qkvz and in_proj_ba, whose rows are interleaved per key-head
// group g: [q_g (dk), k_g (dk), v_g (r*dv), z_g (r*dv)] and [b_g (r), a_g (r)]. Qwen3-Next's
// are loaded as six linears of row blocks, Qwen3.5's as two merged linears applied shard by
// shard (vLLM's in_proj_qkvz and in_proj_ba: one FP8 input scale each), so every
// projection's output is contiguous. Then
// conv1d.weight [nk*dk*2 + nv*dv, 1, K] (rows q, k, v), A_log [nv], dt_bias [nv],
// norm.weight [dv], out_proj [H, nv*dv].
#pragma once

#include <optional>
#include <string>

#include "model/kv_cache.h"
#include "model/layers/activation_buffers.h"
#include "model/layers/linear.h"

namespace vtllm::model {

struct GdnShape {
  int64_t hidden = 0, num_key_heads = 0, num_value_heads = 0, key_head_dim = 0, value_head_dim = 0;
  int64_t conv_kernel = 0;
  bool fused_projections = false;  // Qwen3-Next's in_proj_qkvz / in_proj_ba
  float rms_eps = 1e-6f;
};

class GatedDeltaNet {
 public:
  GatedDeltaNet() = default;
  static GatedDeltaNet Load(const LinearContext& lc, const std::string& prefix, const GdnShape& shape);

  // x: the layer's normed input [T, H] (activation dtype); query_start [S + 1] and
  // state_slots [S] I32: the step's sequences and their slots in `state`; out: [T, H].
  // fuse_quant, with BF16 activations: the gated norm and out_proj's input quantization run
  // as one op: RmsNormGatedQuantFp8 when out_proj is static FP8 (one input scale), or
  // RmsNormGatedQuantFp8PerTokenGroup (where the device has it) when out_proj quantizes per
  // token group in groups that do not straddle value heads (block FP8 with value_head_dim a
  // multiple of the group).
  // x_quantized: x already quantized as input_quant() says (e.g. by the fused RMSNorm that
  // made x), for the q/k/v/z projections; without it they share one quantization of x
  // whenever input_quant() has one (the same bytes each would make alone).
  void Forward(const vt::Queue& q, const vt::Tensor& x, const vt::Tensor& query_start, const vt::Tensor& state_slots,
               const LayerState& state, const vt::Tensor& out, ActivationBuffers& buffers,
               bool fuse_quant = false, const LinearInput* x_quantized = nullptr) const;

  // The FP8 input quantization that the q, k, v and z projections (Qwen3-Next's row blocks
  // of in_proj_qkvz, or Qwen3.5's merged in_proj_qkv + in_proj_z) all take: a static input
  // scale, or a per-token-group quantization; neither when they differ or are not FP8.
  SharedInputQuant input_quant() const;

  int64_t weight_bytes() const;
  const GdnShape& shape() const { return s_; }

 private:
  GdnShape s_;
  Linear q_, k_, v_, z_, b_, a_;  // fused_projections: row blocks of in_proj_qkvz / in_proj_ba
  Linear qkvz_, ba_;              // split: [q | k | v | z] and [b | a], merged as vLLM merges them
  Linear out_proj_;
  vt::Tensor conv_q_, conv_k_, conv_v_;  // [channels, K] views of conv1d.weight
  vt::Tensor conv_weight_;               // [C, 1, K] on the device
  vt::Tensor A_log_, dt_bias_, norm_;
};

}  // namespace vtllm::model
