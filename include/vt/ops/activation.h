// Gated activations.
#pragma once

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// x: [..., 2I] = [gate | up]; out: [..., I]; out = round_out(Silu(gate) * up) with
// Silu from vt/detail/numerics.h (vLLM's silu_and_mul). F32/BF16/F16, contiguous.
void SiluMul(const Queue& q, const Tensor& out, const Tensor& x);

template <>
struct OpTraits<OpId::kSiluMul> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x);
};

// Sigmoid gating: out[r, c] = round_out(base[r, c] + Sigmoid(gate[r, g]) * x[r, c]), with
// g = c for a gate as wide as x and g = 0 for a gate of one column (one gate per row), and
// base = 0 when null. Sigmoid(v) = 1 / (1 + numerics::Exp(-v)); the sum and product are f32,
// rounded once. x, base, out: [R, C] of one float dtype (F32/BF16/F16); gate: [R, C] or
// [R, 1], F32/BF16/F16; out may be base (in place). Used for the shared expert of Qwen2-MoE
// style layers (out = routed + sigmoid(gate(x)) * shared) and for gated attention outputs.
void SigmoidGatedAdd(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate,
                     const Tensor* base = nullptr);

template <>
struct OpTraits<OpId::kSigmoidGatedAdd> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor* base);
};

}  // namespace vt
