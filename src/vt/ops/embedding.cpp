#include "vt/ops/embedding.h"

#include "vt/ops/check.h"

namespace vt {

void Embedding(const Queue& q, const Tensor& out, const Tensor& table, const Tensor& ids) {
  constexpr std::string_view op = "Embedding";
  check::Operand(op, q, "table", table, check::kFloat16Or32);
  check::Operand(op, q, "ids", ids, {DType::kI32});
  check::Output(op, q, "out", out, check::kFloat16Or32);
  check::NDim(op, "table", table, 2);
  check::NDim(op, "ids", ids, 1);
  check::ShapeIs(op, "out", out, {ids.dim(0), table.dim(1)});
  VT_CHECK(table.dim(0) > 0, op, ": table ", table.Describe(), " has no rows");
  Kernel<OpId::kEmbedding>(q.device().type)(q, out, table, ids);
}

}  // namespace vt
