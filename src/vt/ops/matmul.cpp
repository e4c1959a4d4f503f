#include "vt/ops/matmul.h"

#include "vt/ops/check.h"

namespace vt {

namespace {
void CheckMatmulShapes(std::string_view op, const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b,
                       const Tensor* bias) {
  check::NDim(op, "a", a, 2);
  check::NDim(op, "b", b, 2);
  check::NDim(op, "out", out, 2);
  VT_CHECK(b.dim(1) == a.dim(1), op, ": b is ", b.Describe(), " but a has K=", a.dim(1), " (a is ", a.Describe(),
           ")");
  check::ShapeIs(op, "out", out, {a.dim(0), b.dim(0)});
  check::Output(op, q, "out", out, {DType::kBF16, DType::kF32});
  if (bias != nullptr) {
    check::Operand(op, q, "bias", *bias, {DType::kF32, DType::kBF16});
    check::ShapeIs(op, "bias", *bias, {b.dim(0)});
  }
}
}  // namespace

void MatmulFp8(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
               const Tensor* bias) {
  constexpr std::string_view op = "MatmulFp8";
  check::Operand(op, q, "a", a, {DType::kF8E4M3});
  check::Operand(op, q, "b", b, {DType::kF8E4M3});
  CheckMatmulShapes(op, q, out, a, b, bias);
  check::Finite(op, "alpha", alpha);
  Kernel<OpId::kMatmulFp8>(q.device().type)(q, out, a, b, alpha, bias);
}

void Matmul(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias) {
  constexpr std::string_view op = "Matmul";
  check::Operand(op, q, "a", a, {DType::kF32, DType::kBF16});
  check::Operand(op, q, "b", b, {DType::kBF16, DType::kF32});
  CheckMatmulShapes(op, q, out, a, b, bias);
  Kernel<OpId::kMatmul>(q.device().type)(q, out, a, b, bias);
}

}  // namespace vt
