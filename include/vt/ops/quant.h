// Static per-tensor FP8 quantization (DESIGN.md, "The FP8 contract").
#pragma once

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// out[i] = e4m3fn(clamp(float(x[i]) * inv, -448, 448)), inv = 1.0f / input_scale formed
// once in f32; round to nearest even; -0 stays 0x80; NaN stays NaN with its sign.
// x: F32/BF16/F16, contiguous, any shape; out: F8E4M3, same shape.
// input_scale must be finite and > 0. Byte-identical on every backend.
void QuantFp8Static(const Queue& q, const Tensor& out, const Tensor& x, float input_scale);

template <>
struct OpTraits<OpId::kQuantFp8Static> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, float input_scale);
};

}  // namespace vt
