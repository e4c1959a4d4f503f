#include "vt/ops/matmul.h"

#include "vt/ops/check.h"

namespace vt {

void MatmulFp8(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
               const Tensor* bias) {
  constexpr std::string_view op = "MatmulFp8";
  check::Operand(op, q, "a", a, {DType::kF8E4M3});
  check::Operand(op, q, "b", b, {DType::kF8E4M3});
  check::MatmulShapes(op, q, out, a, b, bias);
  check::Finite(op, "alpha", alpha);
  Kernel<OpId::kMatmulFp8>(q.device().type)(q, out, a, b, alpha, bias);
}

void MatmulFp8GroupScaled(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales,
                          const Tensor& b, const Tensor& b_scales, int64_t block_n, int64_t block_k,
                          const Tensor* bias) {
  constexpr std::string_view op = "MatmulFp8GroupScaled";
  check::Operand(op, q, "a", a, {DType::kF8E4M3});
  check::Operand(op, q, "b", b, {DType::kF8E4M3});
  check::MatmulShapes(op, q, out, a, b, bias);
  VT_CHECK(block_n >= 1 && block_k >= 1, op, ": block_n and block_k must be >= 1, got ", block_n, " and ", block_k);
  const int64_t M = a.dim(0), N = b.dim(0), K = a.dim(1);
  const int64_t groups = (K + block_k - 1) / block_k;
  check::Operand(op, q, "a_scales", a_scales, {DType::kF32});
  check::ShapeIs(op, "a_scales", a_scales, {M, groups});
  check::Operand(op, q, "b_scales", b_scales, {DType::kF32});
  check::ShapeIs(op, "b_scales", b_scales, {(N + block_n - 1) / block_n, groups});
  Kernel<OpId::kMatmulFp8GroupScaled>(q.device().type)(q, out, a, a_scales, b, b_scales, block_n, block_k, bias);
}

void Matmul(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias) {
  constexpr std::string_view op = "Matmul";
  check::Operand(op, q, "a", a, {DType::kF32, DType::kBF16});
  check::Operand(op, q, "b", b, {DType::kBF16, DType::kF32});
  check::MatmulShapes(op, q, out, a, b, bias);
  Kernel<OpId::kMatmul>(q.device().type)(q, out, a, b, bias);
}

}  // namespace vt
