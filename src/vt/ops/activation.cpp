#include "vt/ops/activation.h"

#include "vt/ops/check.h"

namespace vt {

void SiluMul(const Queue& q, const Tensor& out, const Tensor& x) {
  constexpr std::string_view op = "SiluMul";
  check::Operand(op, q, "x", x, check::kFloat16Or32);
  check::Output(op, q, "out", out, check::kFloat16Or32);
  VT_CHECK(x.ndim() >= 1 && x.dim(-1) % 2 == 0, op, ": x is ", x.Describe(),
           "; its last dimension must be even ([gate | up])");
  Shape half = x.shape();
  half.back() /= 2;
  check::ShapeIs(op, "out", out, half);
  Kernel<OpId::kSiluMul>(q.device().type)(q, out, x);
}

void SigmoidGatedAdd(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor* base) {
  constexpr std::string_view op = "SigmoidGatedAdd";
  check::Operand(op, q, "x", x, check::kFloat16Or32);
  check::Operand(op, q, "gate", gate, check::kFloat16Or32);
  check::Output(op, q, "out", out, {x.dtype()});
  check::NDim(op, "x", x, 2);
  const int64_t R = x.dim(0), C = x.dim(1);
  check::ShapeIs(op, "out", out, {R, C});
  check::NDim(op, "gate", gate, 2);
  VT_CHECK(gate.dim(0) == R && (gate.dim(1) == C || gate.dim(1) == 1), op, ": gate is ", gate.Describe(),
           " but x is ", x.Describe(), " (need [R, C] or [R, 1])");
  if (base != nullptr) {
    check::Operand(op, q, "base", *base, {x.dtype()});
    check::ShapeIs(op, "base", *base, {R, C});
  }
  VT_CHECK(out.data() != x.data() && out.data() != gate.data(), op, ": out must not alias x or gate");
  Kernel<OpId::kSigmoidGatedAdd>(q.device().type)(q, out, x, gate, base);
}

}  // namespace vt
