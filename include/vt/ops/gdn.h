// Gated DeltaNet (Qwen3-Next / Qwen3.5 linear-attention layers): the causal depthwise conv1d
// over the q|k|v channels and the gated delta rule, both over a flattened batch of
// sequences with a recurrent state per sequence (vLLM's layout: the scheduler's tokens of
// all sequences back to back, query_start offsets, one state slot per sequence).
//
// Batch metadata shared by both ops (I32, on the queue's device):
//   query_start [S + 1]: sequence s owns tokens [query_start[s], query_start[s + 1]);
//     query_start[0] = 0, non-decreasing, query_start[S] = T. A decode row is a sequence
//     of one token; prefill chunks and decodes mix freely.
//   state_slots [S]: the slot of sequence s in the state tensor, in [0, num_slots), or -1
//     (a padding row: its outputs are written as 0, no state is read or written). Two
//     sequences of one call must not share a slot. Slots not named are never touched.
// The state of a slot is always read: the caller zeroes a slot when it hands it to a new
// request (the GDN cache manager's job), so a request resumed from its saved state gives
// what one run over all its tokens gives.
#pragma once

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// Causal depthwise conv1d with state, then SiLU (HF's causal_conv1d_fn / the
// torch fallback `F.silu(conv1d(cat(state, x))[..., :T])`). x: [T, C] F32/BF16/F16;
// weight: [C, Kw] (conv1d.weight [C, 1, Kw] squeezed; any float dtype), no bias; Kw >= 2;
// conv_state: [num_slots, C, Kw - 1] of x's dtype: per channel the last Kw - 1 inputs
// before the sequence's first token, oldest first; out: [T, C] of x's dtype. Per
// sequence, channel c and token t (xs = the state's Kw - 1 columns then the tokens' x):
//   y = Σ_{j<Kw} weight[c, j] * xs[t + j]          (f32, j in order)
//   out[t, c] = round_out(Silu(y))
// and the state becomes the last Kw - 1 columns of xs (exact copies of inputs). One op for
// prefill and decode: a decode step is a batch of one-token sequences.
void CausalConv1d(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& conv_state,
                  const Tensor& query_start, const Tensor& state_slots);

// The gated delta rule with its gating and its q/k normalisation folded in (HF's
// Qwen3NextGatedDeltaNet after the conv: use_qk_l2norm_in_kernel=True). nk key heads, nv
// value heads, nv % nk == 0, r = nv / nk; value head h reads key head h / r.
//   query, key: [T, nk, dk]; value: [T, nv, dv]   F32/BF16/F16 (the conv's output)
//   a, b: [T, nv] F32/BF16/F16 (the in_proj_ba projections, raw)
//   A_log, dt_bias: [nv] F32/BF16/F16
//   state: [num_slots, nv, dk, dv] F32, updated in place
//   out: [T, nv, dv] of value's dtype
//   chunk_size: 0 runs the recurrence token by token (HF's torch_recurrent_gated_delta_rule);
//     > 0 runs the chunked form (HF's torch_chunk_gated_delta_rule, which uses 64) over
//     chunks of that many tokens of each sequence (the last one shorter, which is HF's zero
//     padding). The two are the same math; they differ by f32 rounding only.
// All in f32, per token t of a sequence and value head h (key head h / r):
//   g = -exp(A_log[h]) * softplus(a[t, h] + dt_bias[h])     (softplus: log1p(exp(x)),
//   beta = sigmoid(b[t, h])                                   x for x > 20, as torch)
//   k = key / sqrt(Σ key² + 1e-6);  q = query / sqrt(Σ query² + 1e-6) * dk^-0.5
//   S <- exp(g) S;  kv = Sᵀ k;  S <- S + k (beta (v - kv))ᵀ;  out[t, h] = round_out(Sᵀ q)
// HF computes the l2norm in the model dtype before its cast to f32; here it runs in f32.
void GatedDeltaRule(const Queue& q, const Tensor& out, const Tensor& query, const Tensor& key, const Tensor& value,
                    const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& state,
                    const Tensor& query_start, const Tensor& state_slots, int chunk_size);

template <>
struct OpTraits<OpId::kCausalConv1d> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& conv_state,
                  const Tensor& query_start, const Tensor& state_slots);
};
template <>
struct OpTraits<OpId::kGatedDeltaRule> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& query, const Tensor& key, const Tensor& value,
                  const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& state,
                  const Tensor& query_start, const Tensor& state_slots, int chunk_size);
};

}  // namespace vt
