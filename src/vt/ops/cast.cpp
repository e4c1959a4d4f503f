#include "vt/ops/cast.h"

#include "vt/ops/check.h"

namespace vt {

void Cast(const Queue& q, const Tensor& out, const Tensor& x) {
  constexpr std::string_view op = "Cast";
  check::Operand(op, q, "x", x, {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3});
  check::Output(op, q, "out", out, check::kFloat16Or32);
  check::ShapeIs(op, "out", out, x.shape());
  Kernel<OpId::kCast>(q.device().type)(q, out, x);
}

}  // namespace vt
