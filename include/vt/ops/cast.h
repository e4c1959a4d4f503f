// Element type conversions.
#pragma once

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// out = x converted element by element (RNE; NaN/Inf preserved). Supported: among F32,
// BF16 and F16, and F8E4M3 -> F32/BF16/F16 (exact decode, e.g. to dequantize a weight).
void Cast(const Queue& q, const Tensor& out, const Tensor& x);

template <>
struct OpTraits<OpId::kCast> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x);
};

}  // namespace vt
