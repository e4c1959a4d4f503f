#include "vt/ops/quant.h"

#include "vt/ops/check.h"

namespace vt {

void QuantFp8Static(const Queue& q, const Tensor& out, const Tensor& x, float input_scale) {
  constexpr std::string_view op = "QuantFp8Static";
  check::Operand(op, q, "x", x, check::kFloat16Or32);
  check::Output(op, q, "out", out, {DType::kF8E4M3});
  check::ShapeIs(op, "out", out, x.shape());
  check::PositiveFinite(op, "input_scale", input_scale);
  Kernel<OpId::kQuantFp8Static>(q.device().type)(q, out, x, input_scale);
}

}  // namespace vt
