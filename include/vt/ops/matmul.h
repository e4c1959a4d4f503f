// Matrix products with weights in the on-disk layout b[N, K] (K contiguous): out = a · bᵀ.
#pragma once

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// out[m, n] = alpha * Σ_k a[m, k] · b[n, k] (+ bias[n]), accumulated in f32, rounded once
// to out's dtype (RNE). a: [M, K] F8E4M3; b: [N, K] F8E4M3; out: [M, N] BF16 or F32;
// bias: [N] F32 or BF16, optional. alpha = input_scale * weight_scale, folded by the caller.
// A weight prepared for the queue (vt::PrepareWeight with WeightUse::kMatmulB), or a row
// slice of one, may be multiplied from the backend's own layout of it.
void MatmulFp8(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
               const Tensor* bias = nullptr);

// A GEMM of fp8 operands with a scale per (row of a, group of K) and per (block of rows
// of b, group of K): block-wise FP8 (DeepSeek, Qwen3-*-FP8) and per-channel weights with
// per-token activations (compressed-tensors "channel"/"token").
// a: [M, K] F8E4M3, a_scales: [M, ceil(K/block_k)] F32; b: [N, K] F8E4M3, b_scales:
// [ceil(N/block_n), ceil(K/block_k)] F32; out: [M, N] BF16 or F32; bias: [N] F32 or BF16,
// optional. With G = ceil(K/block_k) groups, group g holding k in [g·block_k, min(K, ..)):
//   t_g       = Σ_{k in g} a[m, k] · b[n, k]                    (f32)
//   acc       = Σ_g t_g · a_scales[m, g] · b_scales[n / block_n, g]  (f32, g ascending)
//   out[m, n] = round_out(acc (+ bias[n]))                      (RNE)
// Block FP8: block_k = block_n = 128. Per-channel/per-token: block_k = K (one group),
// block_n = 1, a_scales [M, 1], b_scales [N, 1] (vLLM computes that case as
// bf16(s_a · f32(s_b · t)); the product order differs by f32 roundings only, inside the
// bound). Accuracy against a float64 reference of the same fp8 values and scales:
// |out - ref| <= 4·K·FLT_EPSILON·Σ_k |a·b·s_a·s_b| plus one rounding of out's dtype; no
// byte equality across backends. Scales must be finite (not checked: they are data).
void MatmulFp8GroupScaled(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales,
                          const Tensor& b, const Tensor& b_scales, int64_t block_n, int64_t block_k,
                          const Tensor* bias = nullptr);

// out[m, n] = Σ_k a[m, k] · b[n, k] (+ bias[n]), accumulated in f32.
// a: [M, K] F32 or BF16; b: [N, K] BF16 or F32; out: [M, N] F32 or BF16; bias: [N] optional.
void Matmul(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias = nullptr);

template <>
struct OpTraits<OpId::kMatmulFp8> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                  const Tensor* bias);
};
template <>
struct OpTraits<OpId::kMatmulFp8GroupScaled> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b,
                  const Tensor& b_scales, int64_t block_n, int64_t block_k, const Tensor* bias);
};
template <>
struct OpTraits<OpId::kMatmul> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias);
};

}  // namespace vt
