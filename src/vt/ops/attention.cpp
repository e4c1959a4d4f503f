#include "vt/ops/attention.h"

#include "vt/ops/check.h"

namespace vt {

namespace {
// key_cache and value_cache: [num_blocks, block_size, Hk, D], same shape and dtype; `written`
// when the op writes them.
void CheckCaches(std::string_view op, const Queue& q, const Tensor& key_cache, const Tensor& value_cache,
                 bool written) {
  check::Operand(op, q, "key_cache", key_cache, check::kFloat16Or32);
  check::Operand(op, q, "value_cache", value_cache, {key_cache.dtype()});
  if (written) {
    check::Writable(op, "key_cache", key_cache);
    check::Writable(op, "value_cache", value_cache);
  }
  check::NDim(op, "key_cache", key_cache, 4);
  check::ShapeIs(op, "value_cache", value_cache, key_cache.shape());
}
}  // namespace

void KvCacheWrite(const Queue& q, const Tensor& key, const Tensor& value, const Tensor& key_cache,
                  const Tensor& value_cache, const Tensor& slot_mapping) {
  constexpr std::string_view op = "KvCacheWrite";
  CheckCaches(op, q, key_cache, value_cache, true);
  check::Operand(op, q, "key", key, {key_cache.dtype()});
  check::Operand(op, q, "value", value, {key_cache.dtype()});
  check::Operand(op, q, "slot_mapping", slot_mapping, {DType::kI64});
  check::NDim(op, "slot_mapping", slot_mapping, 1);
  const int64_t T = slot_mapping.dim(0);
  const int64_t width = key_cache.dim(2) * key_cache.dim(3);
  check::ShapeIs(op, "key", key, {T, width});
  check::ShapeIs(op, "value", value, {T, width});
  Kernel<OpId::kKvCacheWrite>(q.device().type)(q, key, value, key_cache, value_cache, slot_mapping);
}

void PagedAttention(const Queue& q, const Tensor& out, const Tensor& query, const Tensor& key_cache,
                    const Tensor& value_cache, const Tensor& block_tables, const Tensor& seq_lens,
                    const Tensor& query_start_loc, float scale) {
  constexpr std::string_view op = "PagedAttention";
  CheckCaches(op, q, key_cache, value_cache, false);
  check::Operand(op, q, "query", query, {key_cache.dtype()});
  check::Output(op, q, "out", out, {key_cache.dtype()});
  check::Operand(op, q, "block_tables", block_tables, {DType::kI32});
  check::Operand(op, q, "seq_lens", seq_lens, {DType::kI32});
  check::Operand(op, q, "query_start_loc", query_start_loc, {DType::kI32});
  check::NDim(op, "query", query, 2);
  check::NDim(op, "block_tables", block_tables, 2);
  check::NDim(op, "seq_lens", seq_lens, 1);
  const int64_t S = seq_lens.dim(0), Hk = key_cache.dim(2), D = key_cache.dim(3);
  check::ShapeIs(op, "block_tables", block_tables, {S, block_tables.dim(1)});
  check::ShapeIs(op, "query_start_loc", query_start_loc, {S + 1});
  VT_CHECK(query.dim(1) % D == 0 && query.dim(1) / D >= Hk && (query.dim(1) / D) % Hk == 0, op, ": query is ",
           query.Describe(), " but the cache has ", Hk, " KV heads of size ", D,
           " (need [T, Hq * D] with Hq a multiple of Hk)");
  check::ShapeIs(op, "out", out, query.shape());
  check::Finite(op, "scale", scale);
  Kernel<OpId::kPagedAttention>(q.device().type)(q, out, query, key_cache, value_cache, block_tables, seq_lens,
                                                 query_start_loc, scale);
}

}  // namespace vt
