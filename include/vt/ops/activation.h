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

}  // namespace vt
