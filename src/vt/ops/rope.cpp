#include "vt/ops/rope.h"

#include "vt/ops/check.h"

namespace vt {

void RotaryEmbedding(const Queue& q, const Tensor& positions, const Tensor& query, const Tensor* key,
                     const Tensor& cos_sin_cache, int64_t head_size) {
  constexpr std::string_view op = "RotaryEmbedding";
  check::Operand(op, q, "positions", positions, {DType::kI32, DType::kI64});
  check::Output(op, q, "query", query, check::kFloat16Or32);
  check::Operand(op, q, "cos_sin_cache", cos_sin_cache, {DType::kF32});
  check::NDim(op, "positions", positions, 1);
  check::NDim(op, "query", query, 2);
  check::NDim(op, "cos_sin_cache", cos_sin_cache, 2);
  VT_CHECK(head_size > 0 && head_size % 2 == 0, op, ": head_size must be even and > 0, got ", head_size);
  VT_CHECK(cos_sin_cache.dim(1) == head_size, op, ": cos_sin_cache is ", cos_sin_cache.Describe(),
           " but head_size is ", head_size, " (need [max_pos, ", head_size, "])");
  const int64_t T = positions.dim(0);
  VT_CHECK(query.dim(0) == T && query.dim(1) % head_size == 0, op, ": query is ", query.Describe(), " but need [",
           T, ", heads * ", head_size, "] for ", T, " positions");
  if (key != nullptr) {
    check::Output(op, q, "key", *key, {query.dtype()});
    check::NDim(op, "key", *key, 2);
    VT_CHECK(key->dim(0) == T && key->dim(1) % head_size == 0, op, ": key is ", key->Describe(), " but need [", T,
             ", heads * ", head_size, "] for ", T, " positions");
  }
  Kernel<OpId::kRotaryEmbedding>(q.device().type)(q, positions, query, key, cos_sin_cache, head_size);
}

}  // namespace vt
