// Validation shared by the op entry points: done once, at the op boundary, with the
// actual values in the message.
#pragma once

#include <initializer_list>
#include <string_view>

#include "vt/error.h"
#include "vt/queue.h"
#include "vt/tensor.h"

namespace vt::check {

// The tensor is defined and lives on the queue's device.
void OnQueue(std::string_view op, const Queue& q, std::string_view arg, const Tensor& t);
// The tensor is contiguous.
void Contiguous(std::string_view op, std::string_view arg, const Tensor& t);
// The tensor's dtype is one of `allowed`.
void DTypeIn(std::string_view op, std::string_view arg, const Tensor& t, std::initializer_list<DType> allowed);
// The tensor has exactly this shape.
void ShapeIs(std::string_view op, std::string_view arg, const Tensor& t, const Shape& shape);
// The tensor has `ndim` dimensions.
void NDim(std::string_view op, std::string_view arg, const Tensor& t, int ndim);
// A scale is finite and > 0.
void PositiveFinite(std::string_view op, std::string_view arg, float value);
// A value is finite.
void Finite(std::string_view op, std::string_view arg, float value);

// The tensor may be written: not marked read-only (Tensor::SetReadOnly).
void Writable(std::string_view op, std::string_view arg, const Tensor& t);

// All of: on the queue, contiguous, dtype allowed.
inline void Operand(std::string_view op, const Queue& q, std::string_view arg, const Tensor& t,
                    std::initializer_list<DType> allowed) {
  OnQueue(op, q, arg, t);
  Contiguous(op, arg, t);
  DTypeIn(op, arg, t, allowed);
}

// An operand the op writes: Operand and Writable.
inline void Output(std::string_view op, const Queue& q, std::string_view arg, const Tensor& t,
                   std::initializer_list<DType> allowed) {
  Operand(op, q, arg, t, allowed);
  Writable(op, arg, t);
}

// The shapes of out = a · bᵀ (+ bias): a [M, K], b [N, K], out [M, N] BF16 or F32 (written),
// bias [N] F32 or BF16.
void MatmulShapes(std::string_view op, const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b,
                  const Tensor* bias);

// The operands of a dynamic per-token-group FP8 quantization of an [rows, cols] value:
// out [rows, cols] F8E4M3 and scales [rows, ceil(cols / group_size)] F32 (both written),
// group_size >= 1, the floors finite, >= 0 and not both 0.
void PerTokenGroupQuant(std::string_view op, const Queue& q, const Tensor& out, const Tensor& scales, int64_t rows,
                        int64_t cols, int64_t group_size, float amax_floor, float scale_floor);

// The optional side outputs of a norm over x, each checked when not null: residual (x's
// dtype, x's shape; written) and normed_out (BF16, x's shape; written).
void NormSideOutputs(std::string_view op, const Queue& q, const Tensor& x, const Tensor* residual,
                     const Tensor* normed_out = nullptr);

inline constexpr std::initializer_list<DType> kFloat16Or32 = {DType::kF32, DType::kBF16, DType::kF16};

}  // namespace vt::check
