// Matrix products with weights in the on-disk layout b[N, K] (K contiguous): out = a · bᵀ.
#pragma once

#include <span>

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// out[m, n] = alpha * Σ_k a[m, k] · b[n, k] (+ bias[n]), accumulated in f32, rounded once
// to out's dtype (RNE). a: [M, K] F8E4M3; b: [N, K] F8E4M3; out: [M, N] BF16 or F32;
// bias: [N] F32 or BF16, optional. alpha = input_scale * weight_scale, folded by the caller.
void MatmulFp8(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
               const Tensor* bias = nullptr);

// Readies the read-only fp8 weight b [N, K] for MatmulFp8 on q, as b and as each of its
// row slices b.Slice(0, row_starts[i], next start or N) (the shards of a merged weight;
// none: b whole only): where q's kernels multiply a copy of a weight laid out for them (the CPU's
// AVX2 and AVX-512 levels), the copies are made now instead of at the first calls.
// Returns true when MatmulFp8 on q will not read b's own bytes again for b and those
// slices, so that an owner may free them (Tensor::ReleaseBytes); false otherwise (CUDA,
// the scalar and AMX levels, weights the level's decode cannot keep NaN codes of).
bool PrepareMatmulFp8Weight(const Queue& q, const Tensor& b, std::span<const int64_t> row_starts = {});

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
