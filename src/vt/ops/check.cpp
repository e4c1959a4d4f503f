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

}  // namespace vt::check
