#include "vt/ops/attention.h"

#include <utility>

#include "vt/ops/cast.h"
#include "vt/ops/check.h"
#include "vt/ops/norm.h"
#include "vt/ops/rope.h"

namespace vt {

namespace {
// key_cache and value_cache: [num_blocks, block_size, Hk, D], same shape and dtype; `written`
// when the op writes them. k_scale and v_scale: finite and > 0, exactly 1 unless the cache
// is F8E4M3 (a scale given to a cache that does not use it would be silently ignored).
void CheckCaches(std::string_view op, const Queue& q, const Tensor& key_cache, const Tensor& value_cache,
                 bool written, float k_scale, float v_scale) {
  check::Operand(op, q, "key_cache", key_cache, {DType::kF32, DType::kBF16, DType::kF16, DType::kF8E4M3});
  check::Operand(op, q, "value_cache", value_cache, {key_cache.dtype()});
  if (written) {
    check::Writable(op, "key_cache", key_cache);
    check::Writable(op, "value_cache", value_cache);
  }
  check::NDim(op, "key_cache", key_cache, 4);
  check::ShapeIs(op, "value_cache", value_cache, key_cache.shape());
  check::PositiveFinite(op, "k_scale", k_scale);
  check::PositiveFinite(op, "v_scale", v_scale);
  if (key_cache.dtype() != DType::kF8E4M3)
    VT_CHECK(k_scale == 1.0f && v_scale == 1.0f, op, ": k_scale ", k_scale, " and v_scale ", v_scale,
             " apply to an F8E4M3 cache only; a ", DTypeName(key_cache.dtype()), " cache needs 1 and 1");
}

// The dtype of the entries (keys, values, queries, outputs): the cache's, or for an F8E4M3
// cache any float dtype, that of `first`. Returns it after checking `first` is allowed.
DType EntryDType(std::string_view op, const Queue& q, std::string_view name, const Tensor& first,
                 const Tensor& key_cache) {
  if (key_cache.dtype() == DType::kF8E4M3)
    check::Operand(op, q, name, first, check::kFloat16Or32);
  else
    check::Operand(op, q, name, first, {key_cache.dtype()});
  return first.dtype();
}
}  // namespace

void KvCacheWrite(const Queue& q, const Tensor& key, const Tensor& value, const Tensor& key_cache,
                  const Tensor& value_cache, const Tensor& slot_mapping, float k_scale, float v_scale) {
  constexpr std::string_view op = "KvCacheWrite";
  CheckCaches(op, q, key_cache, value_cache, true, k_scale, v_scale);
  const DType d = EntryDType(op, q, "key", key, key_cache);
  check::Operand(op, q, "value", value, {d});
  check::Operand(op, q, "slot_mapping", slot_mapping, {DType::kI64});
  check::NDim(op, "slot_mapping", slot_mapping, 1);
  const int64_t T = slot_mapping.dim(0);
  const int64_t width = key_cache.dim(2) * key_cache.dim(3);
  check::ShapeIs(op, "key", key, {T, width});
  check::ShapeIs(op, "value", value, {T, width});
  Kernel<OpId::kKvCacheWrite>(q.device().type)(q, key, value, key_cache, value_cache, slot_mapping, k_scale,
                                               v_scale);
}

void QkNormRopeCacheWrite(const Queue& q, const Tensor& query_out, const Tensor& query, const Tensor& key,
                          const Tensor& value, const Tensor* q_norm, const Tensor* k_norm, float eps,
                          const Tensor& positions, const Tensor& cos_sin_cache, const Tensor& key_cache,
                          const Tensor& value_cache, const Tensor& slot_mapping, float k_scale, float v_scale) {
  constexpr std::string_view op = "QkNormRopeCacheWrite";
  CheckCaches(op, q, key_cache, value_cache, true, k_scale, v_scale);
  const DType d = EntryDType(op, q, "query", query, key_cache);
  check::Output(op, q, "query_out", query_out, {d});
  check::Operand(op, q, "key", key, {d});
  check::Operand(op, q, "value", value, {d});
  check::Operand(op, q, "positions", positions, {DType::kI32, DType::kI64});
  check::Operand(op, q, "cos_sin_cache", cos_sin_cache, {DType::kF32});
  check::Operand(op, q, "slot_mapping", slot_mapping, {DType::kI64});
  check::NDim(op, "positions", positions, 1);
  check::NDim(op, "query", query, 2);
  check::NDim(op, "cos_sin_cache", cos_sin_cache, 2);
  const int64_t T = positions.dim(0), Hk = key_cache.dim(2), D = key_cache.dim(3);
  VT_CHECK(D % 2 == 0, op, ": the cache's head size ", D, " must be even for RoPE");
  check::ShapeIs(op, "cos_sin_cache", cos_sin_cache, {cos_sin_cache.dim(0), D});
  VT_CHECK(query.dim(0) == T && query.dim(1) % D == 0 && query.dim(1) > 0, op, ": query is ", query.Describe(),
           " but need [", T, ", heads * ", D, "] for ", T, " positions");
  check::ShapeIs(op, "query_out", query_out, query.shape());
  check::ShapeIs(op, "key", key, {T, Hk * D});
  check::ShapeIs(op, "value", value, {T, Hk * D});
  check::ShapeIs(op, "slot_mapping", slot_mapping, {T});
  for (const auto& [name, w] : {std::pair<std::string_view, const Tensor*>{"q_norm", q_norm}, {"k_norm", k_norm}}) {
    if (w == nullptr) continue;
    check::Operand(op, q, name, *w, check::kFloat16Or32);
    check::ShapeIs(op, name, *w, {D});
  }
  check::Finite(op, "eps", eps);
  VT_CHECK(query_out.data() != key.data() && query_out.data() != value.data(), op,
           ": query_out must not alias key or value");
  Kernel<OpId::kQkNormRopeCacheWrite>(q.device().type)(q, query_out, query, key, value, q_norm, k_norm, eps,
                                                        positions, cos_sin_cache, key_cache, value_cache,
                                                        slot_mapping, k_scale, v_scale);
}

void QkNormRopeCacheWriteComposite(const Queue& q, const Tensor& query_out, const Tensor& query, const Tensor& key,
                                   const Tensor& value, const Tensor* q_norm, const Tensor* k_norm, float eps,
                                   const Tensor& positions, const Tensor& cos_sin_cache, const Tensor& key_cache,
                                   const Tensor& value_cache, const Tensor& slot_mapping, float k_scale,
                                   float v_scale) {
  const int64_t T = query.dim(0), D = key_cache.dim(3);
  const int64_t Hq = query.dim(1) / D, Hk = key_cache.dim(2);
  if (q_norm != nullptr)
    RmsNorm(q, query_out.View({T * Hq, D}), query.View({T * Hq, D}), *q_norm, eps);
  else if (query_out.data() != query.data())
    Cast(q, query_out, query);  // a copy in queue order
  const Tensor k = Tensor::Empty({T, Hk * D}, key.dtype(), key.device());
  if (k_norm != nullptr)
    RmsNorm(q, k.View({T * Hk, D}), key.View({T * Hk, D}), *k_norm, eps);
  else
    Cast(q, k, key);
  RotaryEmbedding(q, positions, query_out, &k, cos_sin_cache, D);
  KvCacheWrite(q, k, value, key_cache, value_cache, slot_mapping, k_scale, v_scale);
}

namespace {

// PagedAttention's operands, also PagedAttentionQuantFp8's.
void CheckPagedAttention(std::string_view op, const Queue& q, const Tensor& out, const Tensor& query,
                         const Tensor& key_cache, const Tensor& value_cache, const Tensor& block_tables,
                         const Tensor& seq_lens, const Tensor& query_start_loc, float scale, float k_scale,
                         float v_scale) {
  CheckCaches(op, q, key_cache, value_cache, false, k_scale, v_scale);
  const DType d = EntryDType(op, q, "query", query, key_cache);
  check::Output(op, q, "out", out, {d});
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
}

}  // namespace

void PagedAttention(const Queue& q, const Tensor& out, const Tensor& query, const Tensor& key_cache,
                    const Tensor& value_cache, const Tensor& block_tables, const Tensor& seq_lens,
                    const Tensor& query_start_loc, float scale, float k_scale, float v_scale) {
  CheckPagedAttention("PagedAttention", q, out, query, key_cache, value_cache, block_tables, seq_lens,
                      query_start_loc, scale, k_scale, v_scale);
  Kernel<OpId::kPagedAttention>(q.device().type)(q, out, query, key_cache, value_cache, block_tables, seq_lens,
                                                 query_start_loc, scale, k_scale, v_scale);
}

void PagedAttentionQuantFp8(const Queue& q, const Tensor& out, const Tensor& out8, const Tensor& query,
                            const Tensor& key_cache, const Tensor& value_cache, const Tensor& block_tables,
                            const Tensor& seq_lens, const Tensor& query_start_loc, float scale, float input_scale,
                            float k_scale, float v_scale) {
  constexpr std::string_view op = "PagedAttentionQuantFp8";
  CheckPagedAttention(op, q, out, query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, scale,
                      k_scale, v_scale);
  check::Output(op, q, "out8", out8, {DType::kF8E4M3});
  check::ShapeIs(op, "out8", out8, query.shape());
  check::PositiveFinite(op, "input_scale", input_scale);
  Kernel<OpId::kPagedAttentionQuantFp8>(q.device().type)(q, out, out8, query, key_cache, value_cache, block_tables,
                                                         seq_lens, query_start_loc, scale, input_scale, k_scale,
                                                         v_scale);
}

}  // namespace vt
