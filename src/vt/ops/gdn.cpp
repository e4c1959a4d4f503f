#include "vt/ops/gdn.h"

#include "vt/ops/check.h"

namespace vt {

namespace {

// query_start [S + 1] and state_slots [S] I32 on the queue; returns S. Their values live on
// the device and are checked by the kernels.
int64_t CheckBatch(std::string_view op, const Queue& q, const Tensor& query_start, const Tensor& state_slots) {
  check::Operand(op, q, "query_start", query_start, {DType::kI32});
  check::Operand(op, q, "state_slots", state_slots, {DType::kI32});
  check::NDim(op, "query_start", query_start, 1);
  check::NDim(op, "state_slots", state_slots, 1);
  const int64_t S = state_slots.dim(0);
  check::ShapeIs(op, "query_start", query_start, {S + 1});
  return S;
}

}  // namespace

void CausalConv1d(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& conv_state,
                  const Tensor& query_start, const Tensor& state_slots) {
  constexpr std::string_view op = "CausalConv1d";
  check::Operand(op, q, "x", x, check::kFloat16Or32);
  check::Operand(op, q, "weight", weight, check::kFloat16Or32);
  check::Output(op, q, "out", out, {x.dtype()});
  check::Output(op, q, "conv_state", conv_state, {x.dtype()});
  check::NDim(op, "x", x, 2);
  check::NDim(op, "weight", weight, 2);
  check::NDim(op, "conv_state", conv_state, 3);
  const int64_t T = x.dim(0), C = x.dim(1), Kw = weight.dim(1);
  VT_CHECK(Kw >= 2, op, ": weight is ", weight.Describe(), "; the kernel width must be at least 2");
  check::ShapeIs(op, "weight", weight, {C, Kw});
  check::ShapeIs(op, "out", out, {T, C});
  check::ShapeIs(op, "conv_state", conv_state, {conv_state.dim(0), C, Kw - 1});
  CheckBatch(op, q, query_start, state_slots);
  Kernel<OpId::kCausalConv1d>(q.device().type)(q, out, x, weight, conv_state, query_start, state_slots);
}

void GatedDeltaRule(const Queue& q, const Tensor& out, const Tensor& query, const Tensor& key, const Tensor& value,
                    const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& state,
                    const Tensor& query_start, const Tensor& state_slots, int chunk_size) {
  constexpr std::string_view op = "GatedDeltaRule";
  check::Operand(op, q, "query", query, check::kFloat16Or32);
  check::Operand(op, q, "key", key, check::kFloat16Or32);
  check::Operand(op, q, "value", value, check::kFloat16Or32);
  check::Operand(op, q, "a", a, check::kFloat16Or32);
  check::Operand(op, q, "b", b, check::kFloat16Or32);
  check::Operand(op, q, "A_log", A_log, check::kFloat16Or32);
  check::Operand(op, q, "dt_bias", dt_bias, check::kFloat16Or32);
  check::Output(op, q, "state", state, {DType::kF32});
  check::Output(op, q, "out", out, {value.dtype()});
  check::NDim(op, "query", query, 3);
  check::NDim(op, "value", value, 3);
  check::NDim(op, "state", state, 4);
  const int64_t T = query.dim(0), nk = query.dim(1), dk = query.dim(2), nv = value.dim(1), dv = value.dim(2);
  VT_CHECK(nk >= 1 && nv >= 1 && nv % nk == 0, op, ": value is ", value.Describe(), " and query ", query.Describe(),
           "; the value heads must be a multiple of the key heads");
  VT_CHECK(dk >= 1 && dv >= 1, op, ": query is ", query.Describe(), " and value ", value.Describe(),
           "; head sizes must be at least 1");
  check::ShapeIs(op, "key", key, {T, nk, dk});
  check::ShapeIs(op, "value", value, {T, nv, dv});
  check::ShapeIs(op, "out", out, {T, nv, dv});
  check::ShapeIs(op, "a", a, {T, nv});
  check::ShapeIs(op, "b", b, {T, nv});
  check::ShapeIs(op, "A_log", A_log, {nv});
  check::ShapeIs(op, "dt_bias", dt_bias, {nv});
  check::ShapeIs(op, "state", state, {state.dim(0), nv, dk, dv});
  VT_CHECK(chunk_size >= 0, op, ": chunk_size is ", chunk_size, "; 0 (token by token) or a positive chunk length");
  CheckBatch(op, q, query_start, state_slots);
  Kernel<OpId::kGatedDeltaRule>(q.device().type)(q, out, query, key, value, a, b, A_log, dt_bias, state,
                                                  query_start, state_slots, chunk_size);
}

}  // namespace vt
