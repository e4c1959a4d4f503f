#include "vt/ops/fused.h"

#include <string_view>

#include "vt/ops/activation.h"
#include "vt/ops/matmul.h"
#include "vt/ops/check.h"
#include "vt/ops/norm.h"
#include "vt/ops/quant.h"

namespace vt {

void FusedChainComposite(const Queue& q, std::span<const FOp> recipe, const FusedArgs& args) {
  VT_CHECK(!recipe.empty(), "FusedChainComposite: empty recipe");
  Tensor current = args.x;  // the value flowing from step to step
  for (size_t i = 0; i < recipe.size(); ++i) {
    const bool last = i + 1 == recipe.size();
    switch (recipe[i]) {
      case FOp::kRmsNorm:
      case FOp::kRmsNormZeroCentred:
      case FOp::kRmsNormGated: {
        Tensor tmp = args.normed_out.defined() ? args.normed_out
                                               : Tensor::Empty(current.shape(), DType::kBF16, q.device());
        const Tensor* residual = args.residual.defined() ? &args.residual : nullptr;
        if (recipe[i] == FOp::kRmsNorm)
          RmsNorm(q, tmp, current, args.weight, args.eps, residual);
        else if (recipe[i] == FOp::kRmsNormZeroCentred)
          RmsNormZeroCentred(q, tmp, current, args.weight, args.eps, residual);
        else
          RmsNormGated(q, tmp, current, args.gate, args.weight, args.eps);
        current = tmp;
        break;
      }
      case FOp::kSiluMul: {
        Shape half = current.shape();
        VT_CHECK(!half.empty(), "FusedChainComposite: SiluMul needs at least one dimension");
        half.back() /= 2;
        Tensor tmp = Tensor::Empty(half, DType::kBF16, q.device());
        SiluMul(q, tmp, current);
        current = tmp;
        break;
      }
      case FOp::kQuantFp8Static:
        VT_CHECK(last, "FusedChainComposite: QuantFp8Static must be the last step of a recipe");
        QuantFp8Static(q, args.out, current, args.input_scale);
        break;
      case FOp::kQuantFp8PerTokenGroup:
        VT_CHECK(last, "FusedChainComposite: QuantFp8PerTokenGroup must be the last step of a recipe");
        QuantFp8PerTokenGroup(q, args.out, args.scales, current, args.group_size, args.amax_floor, args.scale_floor);
        break;
    }
  }
}

namespace {
// The checks of RmsNormQuantFp8 and RmsNormZeroCentredQuantFp8 (op: the op's name).
void CheckNormQuantFp8(std::string_view op, const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight,
                       float eps, float input_scale, const Tensor* residual, const Tensor* normed_out) {
  check::Operand(op, q, "x", x, check::kFloat16Or32);
  check::Operand(op, q, "weight", weight, check::kFloat16Or32);
  check::Output(op, q, "out", out, {DType::kF8E4M3});
  VT_CHECK(x.ndim() >= 1 && x.dim(-1) > 0, op, ": x is ", x.Describe(), "; need a non-empty last dimension");
  check::ShapeIs(op, "out", out, x.shape());
  check::ShapeIs(op, "weight", weight, {x.dim(-1)});
  check::Finite(op, "eps", eps);
  check::PositiveFinite(op, "input_scale", input_scale);
  check::NormSideOutputs(op, q, x, residual, normed_out);
}
}  // namespace

void RmsNormQuantFp8(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                     float input_scale, const Tensor* residual, const Tensor* normed_out) {
  CheckNormQuantFp8("RmsNormQuantFp8", q, out, x, weight, eps, input_scale, residual, normed_out);
  Kernel<OpId::kRmsNormQuantFp8>(q.device().type)(q, out, x, weight, eps, input_scale, residual, normed_out);
}

void RmsNormZeroCentredQuantFp8(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                                float input_scale, const Tensor* residual, const Tensor* normed_out) {
  CheckNormQuantFp8("RmsNormZeroCentredQuantFp8", q, out, x, weight, eps, input_scale, residual, normed_out);
  Kernel<OpId::kRmsNormZeroCentredQuantFp8>(q.device().type)(q, out, x, weight, eps, input_scale, residual,
                                                             normed_out);
}

void RmsNormGatedQuantFp8(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate,
                          const Tensor& weight, float eps, float input_scale) {
  constexpr std::string_view op = "RmsNormGatedQuantFp8";
  check::Operand(op, q, "x", x, check::kFloat16Or32);
  check::Operand(op, q, "gate", gate, check::kFloat16Or32);
  check::Operand(op, q, "weight", weight, check::kFloat16Or32);
  check::Output(op, q, "out", out, {DType::kF8E4M3});
  VT_CHECK(x.ndim() >= 1 && x.dim(-1) > 0, op, ": x is ", x.Describe(), "; need a non-empty last dimension");
  check::ShapeIs(op, "out", out, x.shape());
  check::ShapeIs(op, "gate", gate, x.shape());
  check::ShapeIs(op, "weight", weight, {x.dim(-1)});
  check::Finite(op, "eps", eps);
  check::PositiveFinite(op, "input_scale", input_scale);
  Kernel<OpId::kRmsNormGatedQuantFp8>(q.device().type)(q, out, x, gate, weight, eps, input_scale);
}

void SiluMulQuantFp8(const Queue& q, const Tensor& out, const Tensor& x, float input_scale) {
  constexpr std::string_view op = "SiluMulQuantFp8";
  check::Operand(op, q, "x", x, check::kFloat16Or32);
  check::Output(op, q, "out", out, {DType::kF8E4M3});
  VT_CHECK(x.ndim() >= 1 && x.dim(-1) % 2 == 0, op, ": x is ", x.Describe(),
           "; its last dimension must be even ([gate | up])");
  Shape half = x.shape();
  half.back() /= 2;
  check::ShapeIs(op, "out", out, half);
  check::PositiveFinite(op, "input_scale", input_scale);
  Kernel<OpId::kSiluMulQuantFp8>(q.device().type)(q, out, x, input_scale);
}

void MatmulFp8SiluMulQuantFp8(const Queue& q, const Tensor& out8, const Tensor& gate_up, const Tensor& x8,
                              const Tensor& w_gate_up, float alpha, float input_scale) {
  constexpr std::string_view op = "MatmulFp8SiluMulQuantFp8";
  check::Operand(op, q, "x8", x8, {DType::kF8E4M3});
  check::Operand(op, q, "w_gate_up", w_gate_up, {DType::kF8E4M3});
  check::Output(op, q, "out8", out8, {DType::kF8E4M3});
  check::NDim(op, "x8", x8, 2);
  check::NDim(op, "w_gate_up", w_gate_up, 2);
  check::NDim(op, "out8", out8, 2);
  VT_CHECK(w_gate_up.dim(1) == x8.dim(1) && w_gate_up.dim(0) % 2 == 0, op, ": w_gate_up is ", w_gate_up.Describe(),
           " but x8 is ", x8.Describe(), "; w_gate_up must be [2I, K] with K = ", x8.dim(1));
  check::ShapeIs(op, "out8", out8, {x8.dim(0), w_gate_up.dim(0) / 2});
  check::Output(op, q, "gate_up", gate_up, {DType::kBF16});
  check::ShapeIs(op, "gate_up", gate_up, {x8.dim(0), w_gate_up.dim(0)});
  check::Finite(op, "alpha", alpha);
  check::PositiveFinite(op, "input_scale", input_scale);
  Kernel<OpId::kMatmulFp8SiluMulQuantFp8>(q.device().type)(q, out8, gate_up, x8, w_gate_up, alpha, input_scale);
}

namespace {
void CheckNormQuantFp8PerTokenGroup(std::string_view op, const Queue& q, const Tensor& out, const Tensor& scales,
                                    const Tensor& x, const Tensor& weight, float eps, int64_t group_size,
                                    float amax_floor, float scale_floor, const Tensor* residual,
                                    const Tensor* normed_out) {
  check::Operand(op, q, "x", x, check::kFloat16Or32);
  check::Operand(op, q, "weight", weight, check::kFloat16Or32);
  check::NDim(op, "x", x, 2);
  VT_CHECK(x.dim(1) > 0, op, ": x is ", x.Describe(), "; need a non-empty last dimension");
  check::PerTokenGroupQuant(op, q, out, scales, x.dim(0), x.dim(1), group_size, amax_floor, scale_floor);
  check::ShapeIs(op, "weight", weight, {x.dim(1)});
  check::Finite(op, "eps", eps);
  check::NormSideOutputs(op, q, x, residual, normed_out);
}
}  // namespace

void RmsNormQuantFp8PerTokenGroup(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                  const Tensor& weight, float eps, int64_t group_size, float amax_floor,
                                  float scale_floor, const Tensor* residual, const Tensor* normed_out) {
  CheckNormQuantFp8PerTokenGroup("RmsNormQuantFp8PerTokenGroup", q, out, scales, x, weight, eps, group_size,
                                 amax_floor, scale_floor, residual, normed_out);
  Kernel<OpId::kRmsNormQuantFp8PerTokenGroup>(q.device().type)(q, out, scales, x, weight, eps, group_size, amax_floor,
                                                               scale_floor, residual, normed_out);
}

void RmsNormZeroCentredQuantFp8PerTokenGroup(const Queue& q, const Tensor& out, const Tensor& scales,
                                             const Tensor& x, const Tensor& weight, float eps, int64_t group_size,
                                             float amax_floor, float scale_floor, const Tensor* residual,
                                             const Tensor* normed_out) {
  CheckNormQuantFp8PerTokenGroup("RmsNormZeroCentredQuantFp8PerTokenGroup", q, out, scales, x, weight, eps,
                                 group_size, amax_floor, scale_floor, residual, normed_out);
  Kernel<OpId::kRmsNormZeroCentredQuantFp8PerTokenGroup>(q.device().type)(
      q, out, scales, x, weight, eps, group_size, amax_floor, scale_floor, residual, normed_out);
}

void RmsNormGatedQuantFp8PerTokenGroup(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                       const Tensor& gate, const Tensor& weight, float eps, int64_t group_size,
                                       float amax_floor, float scale_floor) {
  constexpr std::string_view op = "RmsNormGatedQuantFp8PerTokenGroup";
  check::Operand(op, q, "x", x, check::kFloat16Or32);
  check::Operand(op, q, "gate", gate, check::kFloat16Or32);
  check::Operand(op, q, "weight", weight, check::kFloat16Or32);
  check::NDim(op, "x", x, 2);
  VT_CHECK(x.dim(1) > 0, op, ": x is ", x.Describe(), "; need a non-empty last dimension");
  check::PerTokenGroupQuant(op, q, out, scales, x.dim(0), x.dim(1), group_size, amax_floor, scale_floor);
  check::ShapeIs(op, "gate", gate, x.shape());
  check::ShapeIs(op, "weight", weight, {x.dim(1)});
  check::Finite(op, "eps", eps);
  Kernel<OpId::kRmsNormGatedQuantFp8PerTokenGroup>(q.device().type)(q, out, scales, x, gate, weight, eps, group_size,
                                                                    amax_floor, scale_floor);
}

void SiluMulQuantFp8PerTokenGroup(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                  int64_t group_size, float amax_floor, float scale_floor) {
  constexpr std::string_view op = "SiluMulQuantFp8PerTokenGroup";
  check::Operand(op, q, "x", x, check::kFloat16Or32);
  check::NDim(op, "x", x, 2);
  VT_CHECK(x.dim(1) > 0 && x.dim(1) % 2 == 0, op, ": x is ", x.Describe(),
           "; its last dimension must be even and > 0 ([gate | up])");
  check::PerTokenGroupQuant(op, q, out, scales, x.dim(0), x.dim(1) / 2, group_size, amax_floor, scale_floor);
  Kernel<OpId::kSiluMulQuantFp8PerTokenGroup>(q.device().type)(q, out, scales, x, group_size, amax_floor,
                                                               scale_floor);
}

}  // namespace vt
