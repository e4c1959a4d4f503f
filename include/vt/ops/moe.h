// Mixture of experts (Qwen3-MoE, Mixtral): routing of each token to its top-k experts, and
// the weighted sum of the chosen experts' SwiGLU MLPs.
#pragma once

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// Top-k softmax routing. logits: [T, E] F32 (the router's output); ids: [T, k] I32;
// weights: [T, k] F32; 1 <= k <= E. Per token, in f32 with only IEEE-exact operations, so
// every backend gives the same bytes:
//   m = max_i l_i;  e_i = numerics::Exp(l_i - m);  s = e_0 + e_1 + ... (index order);
//   p_i = e_i / s;
//   ids = the k largest p_i, largest first; equal values take the lower index first (the
//   stable order; torch.topk documents no order for ties);
//   weights_j = p_{ids_j} / (p_{ids_0} + ... + p_{ids_{k-1}}) when renormalize (the sum in
//   that order), else p_{ids_j}.
// A row holding a NaN gives NaN weights (its ids are then unspecified but in range).
void MoeTopKRouting(const Queue& q, const Tensor& ids, const Tensor& weights, const Tensor& logits,
                    bool renormalize);

// The routed experts' SwiGLU MLPs, weighted and summed. x: [T, H] F32 or BF16 (the
// activation dtype); out: [T, H] of x's dtype; ids [T, k] I32 in [0, E); weights [T, k] F32;
// w_gate_up: [E * 2I, H] BF16 or F32, expert e's gate rows then its up rows at rows
// [e * 2I, (e + 1) * 2I); w_down: [E * H, I] of the same dtype, expert e at rows
// [e * H, (e + 1) * H). For each token t and slot j (e = ids[t, j]):
//   [g | u] = round_act(x_t · w_gate_up_eᵀ)     (f32 sums, rounded to x's dtype)
//   a       = round_act(Silu(g) * u)
//   y_j     = a · w_down_eᵀ                     (f32)
//   out_t   = round_out(Σ_j weights[t, j] * y_j) (f32, j in order)
// A token's result does not depend on the other tokens of the call.
void MoeExperts(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                const Tensor& w_gate_up, const Tensor& w_down);

// MoeExperts with static per-tensor FP8 experts (vLLM's W8A8 fused MoE). x8: [T, H] F8E4M3,
// x quantized with the gate/up input scale shared by all experts; w_gate_up, w_down:
// F8E4M3 in MoeExperts' layout; alpha_gate_up, alpha_down: [E] F32, expert e's
// input_scale * weight_scale of each projection; down_input_scale: the down projections'
// shared input scale; out: [T, H] F32 or BF16 (the activation dtype). Per token and slot:
//   [g | u] = round_out(alpha_gate_up[e] * Σ x8 · w8)
//   a8      = QuantFp8Static(round_out(Silu(g) * u), down_input_scale)
//   y_j     = alpha_down[e] * Σ a8 · w8             (f32)
//   out_t   = round_out(Σ_j weights[t, j] * y_j)
void MoeExpertsFp8(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& ids, const Tensor& weights,
                   const Tensor& w_gate_up, const Tensor& alpha_gate_up, const Tensor& w_down,
                   float down_input_scale, const Tensor& alpha_down);

// MoeExperts with per-tensor FP8 expert weights and FP8 activations scaled per token at run
// time (online FP8, `--quantization fp8`, of a BF16 MoE checkpoint). x8: [T, H] F8E4M3 and
// x_scales: [T, 1] F32, x quantized per token by QuantFp8PerTokenGroup (G = H, the per-token
// floors); w_gate_up, w_down: F8E4M3 in MoeExperts' layout; w_scale_gate_up, w_scale_down:
// [E] F32, expert e's one weight scale of its merged gate/up rows and of its down rows;
// out: [T, H] F32 or BF16 (the activation dtype). Per token t and slot j (e = ids[t, j]),
// in f32:
//   [g | u] = round_out((Σ x8 · w8) * x_scales[t] * w_scale_gate_up[e])  (f32 sum, then left to right)
//   a       = round_out(Silu(g) * u)                                    [I]
//   s_a     = Fp8GroupScale(max |a| over non-NaN, 0, kFp8PerTokenScaleFloor)
//   a8      = Fp8QuantizeDiv(a, s_a)             (QuantFp8PerTokenGroup of the row, G = I)
//   y_j     = (Σ a8 · w8) * s_a * w_scale_down[e]                       (f32 sum, then left to right)
//   out_t   = round_out(Σ_j weights[t, j] * y_j)                        (j in order)
// The scales multiply in MatmulFp8GroupScaled's per-token order (the dense online-FP8
// linears). Every activation row has its own scale: a token's x row for all its experts,
// and each (token, slot) pair's a row; so a token's result does not depend on the other
// tokens of the call.
void MoeExpertsFp8PerToken(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& x_scales,
                           const Tensor& ids, const Tensor& weights, const Tensor& w_gate_up,
                           const Tensor& w_scale_gate_up, const Tensor& w_down, const Tensor& w_scale_down);

// MoeExperts with block-wise or per-channel FP8 expert weights and FP8 activations scaled per
// token and group of block_k columns at run time: vLLM's Fp8MoEMethod with block_quant
// (`quant_method: fp8`, `weight_block_size: [bn, bk]`, Qwen3-*-A3B-FP8) and
// CompressedTensorsW8A8Fp8MoEMethod (`strategy: channel` weights, dynamic `token`
// activations). Groups are MatmulFp8GroupScaled's: group g of a row of K columns holds
// columns [g·block_k, min(K, (g+1)·block_k)), G_K = ceil(K / block_k) of them (the last one
// may be partial; block_k >= K gives one group per row); row blocks hold block_n rows.
// With nI = ceil(I / block_n), nH = ceil(H / block_n), GH = ceil(H / block_k),
// GI = ceil(I / block_k):
//   x8: [T, H] F8E4M3, x_scales: [T, GH] F32 (x quantized by QuantFp8PerTokenGroup with
//       G = block_k and the format's floors);
//   w_gate_up: [E * 2I, H] F8E4M3, w_down: [E * H, I] F8E4M3 (MoeExperts' layout);
//   s_gate_up: [E * 2nI, GH] F32: expert e's gate scale rows [e·2nI, e·2nI + nI) (gate row
//       i reads e·2nI + i / block_n) then its up scale rows [e·2nI + nI, (e+1)·2nI) (up row i
//       reads e·2nI + nI + i / block_n): each projection keeps its own blocks even when I is
//       not a multiple of block_n (the checkpoints' weight_scale_inv rows, as stored);
//   s_down: [E * nH, GI] F32: expert e's rows [e·nH, (e+1)·nH), down row h reads e·nH + h / block_n;
//   out: [T, H] F32 or BF16 (the activation dtype); amax_floor, scale_floor: the floors of
//       the down input's quantizer (QuantFp8PerTokenGroup's; block: kFp8BlockAmaxFloor, 0;
//       per token: 0, kFp8PerTokenScaleFloor).
// Per token t and slot j (e = ids[t, j]), every step in f32:
//   g_i  = round_out(Σ_g (Σ_{c in g} x8[t, c]·w8[e·2I + i, c]) · x_scales[t, g] · s_gate_up[e·2nI + i/bn, g])
//   u_i  = round_out(Σ_g (Σ_{c in g} x8[t, c]·w8[e·2I + I + i, c]) · x_scales[t, g] · s_gate_up[e·2nI + nI + i/bn, g])
//   a    = round_out(Silu(g) * u)                                         [I]
//   (a8, s_a) = QuantFp8PerTokenGroup(a, G = block_k, amax_floor, scale_floor)  s_a: [GI]
//   y_h  = Σ_g (Σ_{c in g} a8[c]·w8[e·H + h, c]) · s_a[g] · s_down[e·nH + h/bn, g]
//   out_t = round_out(Σ_j weights[t, j] * y_j)                            (j in order)
// (the groups g ascending, each group's sum times the activation's scale then the weight's:
// MatmulFp8GroupScaled's product, row by row.) Block FP8: block_n = block_k = 128 and the
// block floors; per-channel: block_n = 1, block_k >= max(H, I) (one group per row: x_scales
// [T, 1], s_gate_up [E * 2I, 1], s_down [E * H, 1]) and the per-token floors. Every
// activation row has its own scales, so a token's result does not depend on the other tokens
// of the call. Accuracy: each product is within MatmulFp8GroupScaled's bound of its float64
// value; no byte equality across backends. Scales must be finite (not checked: they are data).
void MoeExpertsFp8GroupScaled(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& x_scales,
                              const Tensor& ids, const Tensor& weights, const Tensor& w_gate_up,
                              const Tensor& s_gate_up, const Tensor& w_down, const Tensor& s_down, int64_t block_n,
                              int64_t block_k, float amax_floor, float scale_floor);

template <>
struct OpTraits<OpId::kMoeTopKRouting> {
  using Fn = void(const Queue& q, const Tensor& ids, const Tensor& weights, const Tensor& logits, bool renormalize);
};
template <>
struct OpTraits<OpId::kMoeExperts> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                  const Tensor& w_gate_up, const Tensor& w_down);
};
template <>
struct OpTraits<OpId::kMoeExpertsFp8> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& ids, const Tensor& weights,
                  const Tensor& w_gate_up, const Tensor& alpha_gate_up, const Tensor& w_down,
                  float down_input_scale, const Tensor& alpha_down);
};
template <>
struct OpTraits<OpId::kMoeExpertsFp8PerToken> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& x_scales, const Tensor& ids,
                  const Tensor& weights, const Tensor& w_gate_up, const Tensor& w_scale_gate_up,
                  const Tensor& w_down, const Tensor& w_scale_down);
};
template <>
struct OpTraits<OpId::kMoeExpertsFp8GroupScaled> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& x_scales, const Tensor& ids,
                  const Tensor& weights, const Tensor& w_gate_up, const Tensor& s_gate_up, const Tensor& w_down,
                  const Tensor& s_down, int64_t block_n, int64_t block_k, float amax_floor, float scale_floor);
};

}  // namespace vt
