#include "vt/ops/norm.h"

#include "vt/ops/check.h"

namespace vt {

namespace {
void CheckRows(std::string_view op, const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight) {
  check::Operand(op, q, "x", x, check::kFloat16Or32);
  check::Output(op, q, "out", out, check::kFloat16Or32);
  check::Operand(op, q, "weight", weight, check::kFloat16Or32);
  VT_CHECK(x.ndim() >= 1 && x.dim(-1) > 0, op, ": x is ", x.Describe(), "; need a non-empty last dimension");
  check::ShapeIs(op, "out", out, x.shape());
  check::ShapeIs(op, "weight", weight, {x.dim(-1)});
}

// RmsNorm and RmsNormZeroCentred: the same operands, each its own kernel.
template <OpId kId>
void RmsNormOp(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
               const Tensor* residual) {
  constexpr std::string_view op = OpName(kId);
  CheckRows(op, q, out, x, weight);
  check::Finite(op, "eps", eps);
  check::NormSideOutputs(op, q, x, residual);
  Kernel<kId>(q.device().type)(q, out, x, weight, eps, residual);
}
}  // namespace

void RmsNorm(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
             const Tensor* residual) {
  RmsNormOp<OpId::kRmsNorm>(q, out, x, weight, eps, residual);
}

void RmsNormZeroCentred(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                        const Tensor* residual) {
  RmsNormOp<OpId::kRmsNormZeroCentred>(q, out, x, weight, eps, residual);
}

void RmsNormGated(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight,
                  float eps) {
  constexpr std::string_view op = "RmsNormGated";
  CheckRows(op, q, out, x, weight);
  check::Finite(op, "eps", eps);
  check::Operand(op, q, "gate", gate, check::kFloat16Or32);
  check::ShapeIs(op, "gate", gate, x.shape());
  Kernel<OpId::kRmsNormGated>(q.device().type)(q, out, x, gate, weight, eps);
}

}  // namespace vt
