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

}  // namespace vt
