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

// out[m, n] = Σ_k a[m, k] · b[n, k] (+ bias[n]), accumulated in f32.
// a: [M, K] F32 or BF16; b: [N, K] BF16 or F32; out: [M, N] F32 or BF16; bias: [N] optional.
void Matmul(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias = nullptr);

template <>
struct OpTraits<OpId::kMatmulFp8> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                  const Tensor* bias);
};
template <>
struct OpTraits<OpId::kMatmul> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias);
};

}  // namespace vt
