// RMS normalisation, plain and gated. Rows are the last dimension; all tensors contiguous.
//
// Arithmetic (identical on every backend; see vt/detail/numerics.h):
//   ss  = SumSquaresCanonical(row)           f32, canonical 32-lane order
//   inv = RmsInverse(ss, H, eps)             1 / sqrt(ss / H + eps)
//   t   = round_out(x * inv)                 rounded to out's dtype, as HF and vLLM do
//   y   = round_out(t * w)
// With a residual: s = round_x(x + residual) is computed first, written back to residual,
// and normalised instead of x (vLLM's fused_add_rms_norm; HF's residual add in the model
// dtype).
#pragma once

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// x: [..., H] F32/BF16/F16; weight: [H] same family; out: like x (F32/BF16/F16).
// residual (optional): like x, updated in place.
void RmsNorm(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
             const Tensor* residual = nullptr);

// Gated RMSNorm (Gated DeltaNet's output norm):
//   t = round_out(x * inv); u = round_out(t * w); y = round_out(u * Silu(gate)).
void RmsNormGated(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight,
                  float eps);

// Zero-centred RMSNorm (Qwen3-Next / Qwen3.5's Qwen3NextRMSNorm, Gemma's): the checkpoint
// stores w - 1, and HF rounds once, at the end, where RmsNorm rounds t first:
//   y = round_out((x * inv) * (1 + w))      (f32; ss and inv as above)
// A residual works as in RmsNorm. CPU only so far.
void RmsNormZeroCentred(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                        const Tensor* residual = nullptr);

template <>
struct OpTraits<OpId::kRmsNormZeroCentred> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                  const Tensor* residual);
};
template <>
struct OpTraits<OpId::kRmsNorm> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                  const Tensor* residual);
};
template <>
struct OpTraits<OpId::kRmsNormGated> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight,
                  float eps);
};

}  // namespace vt
