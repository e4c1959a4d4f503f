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

void QuantFp8PerTokenGroup(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                           int64_t group_size, float amax_floor, float scale_floor) {
  constexpr std::string_view op = "QuantFp8PerTokenGroup";
  check::Operand(op, q, "x", x, check::kFloat16Or32);
  check::NDim(op, "x", x, 2);
  check::PerTokenGroupQuant(op, q, out, scales, x.dim(0), x.dim(1), group_size, amax_floor, scale_floor);
  Kernel<OpId::kQuantFp8PerTokenGroup>(q.device().type)(q, out, scales, x, group_size, amax_floor, scale_floor);
}

}  // namespace vt
