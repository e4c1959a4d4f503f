// Plain scalar references of the CPU kernels: single-threaded, written for clarity, the
// named baseline the fast paths are tested against (llm.c's matmul_forward_naive).
// Each works on a range of rows [row_begin, row_end) of contiguous tensors so that the
// portable kernels can also run them in parallel.
#pragma once

#include <cstdint>

#include "vt/tensor.h"

namespace vt::cpu::ref {

// Elements [begin, end) of x -> out (F8E4M3), per the FP8 contract.
void QuantFp8Static(const Tensor& out, const Tensor& x, float input_scale, int64_t begin, int64_t end);
// Rows [m0, m1) of out = alpha * a·bᵀ (+ bias), f32 accumulation in k order.
void MatmulFp8(const Tensor& out, const Tensor& a, const Tensor& b, float alpha, const Tensor* bias, int64_t m0,
               int64_t m1);
void Matmul(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias, int64_t m0, int64_t m1);
// Rows [m0, m1) of QuantFp8PerTokenGroup (vt/ops/quant.h), element by element.
void QuantFp8PerTokenGroup(const Tensor& out, const Tensor& scales, const Tensor& x, int64_t group_size,
                           float amax_floor, float scale_floor, int64_t m0, int64_t m1);
// Rows [m0, m1) of MatmulFp8GroupScaled (vt/ops/matmul.h): per group a k-order f32 sum.
void MatmulFp8GroupScaled(const Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b,
                          const Tensor& b_scales, int64_t block_n, int64_t block_k, const Tensor* bias, int64_t m0,
                          int64_t m1);
void RmsNorm(const Tensor& out, const Tensor& x, const Tensor& weight, float eps, const Tensor* residual,
             int64_t row0, int64_t row1);
void RmsNormZeroCentred(const Tensor& out, const Tensor& x, const Tensor& weight, float eps, const Tensor* residual,
                        int64_t row0, int64_t row1);
void RmsNormGated(const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight, float eps,
                  int64_t row0, int64_t row1);
void SiluMul(const Tensor& out, const Tensor& x, int64_t row0, int64_t row1);
// Rows [m0, m1) of the per-token-group fused recipes (vt/ops/fused.h): the step's reference
// above into a BF16 row buffer (or normed_out's rows), then QuantFp8PerTokenGroup's
// reference of those rows. out, scales, normed_out: the op's whole tensors. zero_centred:
// RmsNormZeroCentred as the first step (RmsNormZeroCentredQuantFp8PerTokenGroup).
void RmsNormQuantFp8PerTokenGroup(const Tensor& out, const Tensor& scales, const Tensor& x, const Tensor& weight,
                                  float eps, int64_t group_size, float amax_floor, float scale_floor,
                                  const Tensor* residual, const Tensor* normed_out, int64_t m0, int64_t m1,
                                  bool zero_centred);
void RmsNormGatedQuantFp8PerTokenGroup(const Tensor& out, const Tensor& scales, const Tensor& x, const Tensor& gate,
                                       const Tensor& weight, float eps, int64_t group_size, float amax_floor,
                                       float scale_floor, int64_t m0, int64_t m1);
void SiluMulQuantFp8PerTokenGroup(const Tensor& out, const Tensor& scales, const Tensor& x, int64_t group_size,
                                  float amax_floor, float scale_floor, int64_t m0, int64_t m1);
void SigmoidGatedAdd(const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor* base, int64_t row0,
                     int64_t row1);
void Cast(const Tensor& out, const Tensor& x, int64_t begin, int64_t end);
// Row t of RotaryEmbedding's query or key x (vt/ops/rope.h), with the cos c[0, D/2) and sin
// s[0, D/2) of the row's position: each pair of a head's halves rotated in f32 (two products,
// then their difference or sum) and rounded once to x's dtype.
void RotaryEmbeddingRow(const Tensor& x, int64_t t, int64_t head_size, const float* c, const float* s);
// Tokens [t0, t1) of the MoE ops (vt/ops/moe.h), each token's experts computed densely in
// the order of its slots. The routing is the CPU kernel itself (one scalar definition for
// every ISA level); the experts' references are the plain loops the kernels are tested
// against. An expert id out of [0, E) throws vt::Error.
void MoeTopKRouting(const Tensor& ids, const Tensor& weights, const Tensor& logits, bool renormalize, int64_t t0,
                    int64_t t1);
void MoeExperts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                const Tensor& w_gate_up, const Tensor& w_down, int64_t t0, int64_t t1);
void MoeExpertsFp8(const Tensor& out, const Tensor& x8, const Tensor& ids, const Tensor& weights,
                   const Tensor& w_gate_up, const Tensor& alpha_gate_up, const Tensor& w_down,
                   float down_input_scale, const Tensor& alpha_down, int64_t t0, int64_t t1);
void MoeExpertsFp8PerToken(const Tensor& out, const Tensor& x8, const Tensor& x_scales, const Tensor& ids,
                           const Tensor& weights, const Tensor& w_gate_up, const Tensor& w_scale_gate_up,
                           const Tensor& w_down, const Tensor& w_scale_down, int64_t t0, int64_t t1);
void MoeExpertsFp8GroupScaled(const Tensor& out, const Tensor& x8, const Tensor& x_scales, const Tensor& ids,
                              const Tensor& weights, const Tensor& w_gate_up, const Tensor& s_gate_up,
                              const Tensor& w_down, const Tensor& s_down, int64_t block_n, int64_t block_k,
                              float amax_floor, float scale_floor, int64_t t0, int64_t t1);

// The Gated DeltaNet ops (vt/ops/gdn.h; cpu/gdn_reference.cpp). Like the routing, these
// scalar loops are also the CPU kernels (cpu/gdn.cpp runs them in parallel). The batch
// metadata is checked by CheckGdnBatch (vt::Error naming the op and the bad value) first.
void CheckGdnBatch(const char* op, const Tensor& query_start, const Tensor& state_slots, int64_t T,
                   int64_t num_slots);
// Channels [c0, c1) of every sequence.
void CausalConv1d(const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& conv_state,
                  const Tensor& query_start, const Tensor& state_slots, int64_t c0, int64_t c1);
// Work items [w0, w1), item w = s * nv + h: value head h of sequence s, token by token
// (chunk_size 0) or in chunks of chunk_size tokens.
void GatedDeltaRule(const Tensor& out, const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& a,
                    const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& state,
                    const Tensor& query_start, const Tensor& state_slots, int chunk_size, int64_t w0, int64_t w1);

// Rows of a tensor viewed as [rows, last_dim].
inline int64_t Rows(const Tensor& t) { return t.dim(-1) == 0 ? 0 : t.numel() / t.dim(-1); }

}  // namespace vt::cpu::ref
