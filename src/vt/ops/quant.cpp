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
  check::Output(op, q, "out", out, {DType::kF8E4M3});
  check::ShapeIs(op, "out", out, x.shape());
  VT_CHECK(group_size >= 1, op, ": group_size must be >= 1, got ", group_size);
  check::Output(op, q, "scales", scales, {DType::kF32});
  const int64_t groups = (x.dim(1) + group_size - 1) / group_size;
  check::ShapeIs(op, "scales", scales, {x.dim(0), groups});
  check::Finite(op, "amax_floor", amax_floor);
  check::Finite(op, "scale_floor", scale_floor);
  VT_CHECK(amax_floor >= 0.0f && scale_floor >= 0.0f && (amax_floor > 0.0f || scale_floor > 0.0f), op,
           ": amax_floor and scale_floor must be >= 0 and not both 0, got ", amax_floor, " and ", scale_floor);
  Kernel<OpId::kQuantFp8PerTokenGroup>(q.device().type)(q, out, scales, x, group_size, amax_floor, scale_floor);
}

}  // namespace vt
