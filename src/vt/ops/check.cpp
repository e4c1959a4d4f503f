#include "vt/ops/check.h"

#include <cmath>
#include <string>

namespace vt::check {

void OnQueue(std::string_view op, const Queue& q, std::string_view arg, const Tensor& t) {
  VT_CHECK(t.defined(), op, ": ", arg, " is an undefined tensor");
  VT_CHECK(t.device() == q.device(), op, ": ", arg, " is on ", ToString(t.device()), " but the queue runs on ",
           ToString(q.device()), " (no cross-device fallback; move the tensor first)");
}

void Writable(std::string_view op, std::string_view arg, const Tensor& t) {
  VT_CHECK(!t.read_only(), op, ": ", arg, " ", t.Describe(), " is read-only (Tensor::SetReadOnly) but the op writes it");
}

void Contiguous(std::string_view op, std::string_view arg, const Tensor& t) {
  VT_CHECK(t.is_contiguous(), op, ": ", arg, " ", t.Describe(), " must be contiguous (strides ",
           ShapeToString(t.strides()), ")");
}

void DTypeIn(std::string_view op, std::string_view arg, const Tensor& t, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype() == d) return;
  std::string names;
  for (DType d : allowed) {
    if (!names.empty()) names += "/";
    names += DTypeName(d);
  }
  throw Error(StrCat(op, ": ", arg, " is ", t.Describe(), " but must be ", names));
}

void ShapeIs(std::string_view op, std::string_view arg, const Tensor& t, const Shape& shape) {
  VT_CHECK(t.shape() == shape, op, ": ", arg, " is ", t.Describe(), " but must have shape ", ShapeToString(shape));
}

void NDim(std::string_view op, std::string_view arg, const Tensor& t, int ndim) {
  VT_CHECK(t.ndim() == ndim, op, ": ", arg, " is ", t.Describe(), " but must have ", ndim, " dimensions");
}

void PositiveFinite(std::string_view op, std::string_view arg, float value) {
  VT_CHECK(std::isfinite(value) && value > 0.0f, op, ": ", arg, " must be finite and > 0, got ", value);
}

void Finite(std::string_view op, std::string_view arg, float value) {
  VT_CHECK(std::isfinite(value), op, ": ", arg, " must be finite, got ", value);
}

void MatmulShapes(std::string_view op, const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b,
                  const Tensor* bias) {
  NDim(op, "a", a, 2);
  NDim(op, "b", b, 2);
  NDim(op, "out", out, 2);
  VT_CHECK(b.dim(1) == a.dim(1), op, ": b is ", b.Describe(), " but a has K=", a.dim(1), " (a is ", a.Describe(),
           ")");
  ShapeIs(op, "out", out, {a.dim(0), b.dim(0)});
  Output(op, q, "out", out, {DType::kBF16, DType::kF32});
  if (bias != nullptr) {
    Operand(op, q, "bias", *bias, {DType::kF32, DType::kBF16});
    ShapeIs(op, "bias", *bias, {b.dim(0)});
  }
}

void PerTokenGroupQuant(std::string_view op, const Queue& q, const Tensor& out, const Tensor& scales, int64_t rows,
                        int64_t cols, int64_t group_size, float amax_floor, float scale_floor) {
  Output(op, q, "out", out, {DType::kF8E4M3});
  ShapeIs(op, "out", out, {rows, cols});
  VT_CHECK(group_size >= 1, op, ": group_size must be >= 1, got ", group_size);
  Output(op, q, "scales", scales, {DType::kF32});
  ShapeIs(op, "scales", scales, {rows, (cols + group_size - 1) / group_size});
  Finite(op, "amax_floor", amax_floor);
  Finite(op, "scale_floor", scale_floor);
  VT_CHECK(amax_floor >= 0.0f && scale_floor >= 0.0f && (amax_floor > 0.0f || scale_floor > 0.0f), op,
           ": amax_floor and scale_floor must be >= 0 and not both 0, got ", amax_floor, " and ", scale_floor);
}

void NormSideOutputs(std::string_view op, const Queue& q, const Tensor& x, const Tensor* residual,
                     const Tensor* normed_out) {
  if (residual != nullptr) {
    Output(op, q, "residual", *residual, {x.dtype()});
    ShapeIs(op, "residual", *residual, x.shape());
  }
  if (normed_out != nullptr) {
    Output(op, q, "normed_out", *normed_out, {DType::kBF16});
    ShapeIs(op, "normed_out", *normed_out, x.shape());
  }
}

}  // namespace vt::check
