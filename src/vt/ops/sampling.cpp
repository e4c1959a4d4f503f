// Entry points of the sampling ops: shape, dtype and device checks, then dispatch. The
// contents of device-resident index tensors are checked by the kernels (see sampling.h).
#include "vt/ops/sampling.h"

#include "vt/ops/check.h"

namespace vt {

namespace {

// logits: [R, V] F32 with V > 0; returns R.
int64_t CheckLogits(std::string_view op, const Queue& q, const Tensor& logits, bool written) {
  if (written) {
    check::Output(op, q, "logits", logits, {DType::kF32});
  } else {
    check::Operand(op, q, "logits", logits, {DType::kF32});
  }
  check::NDim(op, "logits", logits, 2);
  VT_CHECK(logits.dim(1) > 0, op, ": logits ", logits.Describe(), " has an empty vocabulary");
  return logits.dim(0);
}

// A CSR offsets tensor [R + 1] I32 and its 1-D entry tensors.
void CheckCsr(std::string_view op, const Queue& q, int64_t rows, std::string_view offsets_name, const Tensor& offsets,
              std::initializer_list<std::pair<std::string_view, const Tensor*>> entries) {
  check::Operand(op, q, offsets_name, offsets, {DType::kI32});
  check::ShapeIs(op, offsets_name, offsets, {rows + 1});
  for (const auto& [name, t] : entries) {
    check::OnQueue(op, q, name, *t);
    check::Contiguous(op, name, *t);
    check::NDim(op, name, *t, 1);
  }
}

}  // namespace

void TopKLogprobs(const Queue& q, const Tensor& logits, const Tensor& targets, const Tensor& top_ids,
                  const Tensor& top_logprobs, const Tensor& target_logprobs, const Tensor& target_ranks) {
  constexpr std::string_view op = "TopKLogprobs";
  const int64_t R = CheckLogits(op, q, logits, false);
  check::Operand(op, q, "targets", targets, {DType::kI32});
  check::ShapeIs(op, "targets", targets, {R});
  check::Output(op, q, "top_ids", top_ids, {DType::kI32});
  check::NDim(op, "top_ids", top_ids, 2);
  const int64_t K = top_ids.dim(1);
  check::ShapeIs(op, "top_ids", top_ids, {R, K});
  VT_CHECK(K <= logits.dim(1), op, ": top_ids ", top_ids.Describe(), " asks for ", K, " tokens of a ", logits.dim(1),
           "-token vocabulary");
  check::Output(op, q, "top_logprobs", top_logprobs, {DType::kF32});
  check::ShapeIs(op, "top_logprobs", top_logprobs, {R, K});
  check::Output(op, q, "target_logprobs", target_logprobs, {DType::kF32});
  check::ShapeIs(op, "target_logprobs", target_logprobs, {R});
  check::Output(op, q, "target_ranks", target_ranks, {DType::kI32});
  check::ShapeIs(op, "target_ranks", target_ranks, {R});
  if (R == 0) return;
  Kernel<OpId::kTopKLogprobs>(q.device().type)(q, logits, targets, top_ids, top_logprobs, target_logprobs,
                                               target_ranks);
}

void LogitsMask(const Queue& q, const Tensor& logits, const Tensor& allowed_offsets, const Tensor& allowed_ids,
                const Tensor& banned_offsets, const Tensor& banned_ids) {
  constexpr std::string_view op = "LogitsMask";
  const int64_t R = CheckLogits(op, q, logits, true);
  CheckCsr(op, q, R, "allowed_offsets", allowed_offsets, {{"allowed_ids", &allowed_ids}});
  CheckCsr(op, q, R, "banned_offsets", banned_offsets, {{"banned_ids", &banned_ids}});
  check::DTypeIn(op, "allowed_ids", allowed_ids, {DType::kI32});
  check::DTypeIn(op, "banned_ids", banned_ids, {DType::kI32});
  if (R == 0) return;
  Kernel<OpId::kLogitsMask>(q.device().type)(q, logits, allowed_offsets, allowed_ids, banned_offsets, banned_ids);
}

void LogitsAddSparse(const Queue& q, const Tensor& logits, const Tensor& offsets, const Tensor& ids,
                     const Tensor& values) {
  constexpr std::string_view op = "LogitsAddSparse";
  const int64_t R = CheckLogits(op, q, logits, true);
  CheckCsr(op, q, R, "offsets", offsets, {{"ids", &ids}, {"values", &values}});
  check::DTypeIn(op, "ids", ids, {DType::kI32});
  check::DTypeIn(op, "values", values, {DType::kF32});
  VT_CHECK(ids.dim(0) == values.dim(0), op, ": ids ", ids.Describe(), " and values ", values.Describe(),
           " must have the same length");
  if (R == 0) return;
  Kernel<OpId::kLogitsAddSparse>(q.device().type)(q, logits, offsets, ids, values);
}

void LogitsPenalties(const Queue& q, const Tensor& logits, const Tensor& offsets, const Tensor& ids,
                     const Tensor& counts, const Tensor& penalties) {
  constexpr std::string_view op = "LogitsPenalties";
  const int64_t R = CheckLogits(op, q, logits, true);
  CheckCsr(op, q, R, "offsets", offsets, {{"ids", &ids}, {"counts", &counts}});
  check::DTypeIn(op, "ids", ids, {DType::kI32});
  check::DTypeIn(op, "counts", counts, {DType::kI32});
  VT_CHECK(ids.dim(0) == counts.dim(0), op, ": ids ", ids.Describe(), " and counts ", counts.Describe(),
           " must have the same length");
  check::Operand(op, q, "penalties", penalties, {DType::kF32});
  check::ShapeIs(op, "penalties", penalties, {R, 3});
  if (R == 0) return;
  Kernel<OpId::kLogitsPenalties>(q.device().type)(q, logits, offsets, ids, counts, penalties);
}

void SampleTokens(const Queue& q, const Tensor& out_ids, const Tensor& logits, const Tensor& params,
                  const Tensor& top_k, const Tensor& random_bits) {
  constexpr std::string_view op = "SampleTokens";
  const int64_t R = CheckLogits(op, q, logits, false);
  check::Output(op, q, "out_ids", out_ids, {DType::kI32});
  check::ShapeIs(op, "out_ids", out_ids, {R});
  check::Operand(op, q, "params", params, {DType::kF32});
  check::ShapeIs(op, "params", params, {R, 3});
  check::Operand(op, q, "top_k", top_k, {DType::kI32});
  check::ShapeIs(op, "top_k", top_k, {R});
  check::Operand(op, q, "random_bits", random_bits, {DType::kI64});
  check::ShapeIs(op, "random_bits", random_bits, {R});
  if (R == 0) return;
  Kernel<OpId::kSampleTokens>(q.device().type)(q, out_ids, logits, params, top_k, random_bits);
}

}  // namespace vt
