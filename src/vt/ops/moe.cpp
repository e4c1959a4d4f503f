#include "vt/ops/moe.h"

#include "vt/ops/check.h"

namespace vt {

void MoeTopKRouting(const Queue& q, const Tensor& ids, const Tensor& weights, const Tensor& logits,
                    bool renormalize) {
  constexpr std::string_view op = "MoeTopKRouting";
  check::Operand(op, q, "logits", logits, {DType::kF32});
  check::NDim(op, "logits", logits, 2);
  check::Output(op, q, "ids", ids, {DType::kI32});
  check::Output(op, q, "weights", weights, {DType::kF32});
  check::NDim(op, "ids", ids, 2);
  const int64_t T = logits.dim(0), E = logits.dim(1), k = ids.dim(1);
  VT_CHECK(k >= 1 && k <= E, op, ": ids is ", ids.Describe(), ": k must be in [1, ", E,
           "] (the experts of logits ", logits.Describe(), ")");
  check::ShapeIs(op, "ids", ids, {T, k});
  check::ShapeIs(op, "weights", weights, {T, k});
  Kernel<OpId::kMoeTopKRouting>(q.device().type)(q, ids, weights, logits, renormalize);
}

namespace {

// The shapes shared by MoeExperts and MoeExpertsFp8; returns E.
int64_t CheckExperts(std::string_view op, const Queue& q, const Tensor& out, const Tensor& x, const Tensor& ids,
                     const Tensor& weights, const Tensor& w_gate_up, const Tensor& w_down) {
  check::NDim(op, "x", x, 2);
  check::NDim(op, "ids", ids, 2);
  check::NDim(op, "w_gate_up", w_gate_up, 2);
  check::NDim(op, "w_down", w_down, 2);
  check::Operand(op, q, "ids", ids, {DType::kI32});
  check::Operand(op, q, "weights", weights, {DType::kF32});
  check::Output(op, q, "out", out, {DType::kF32, DType::kBF16});
  const int64_t T = x.dim(0), H = x.dim(1), k = ids.dim(1), I = w_down.dim(1);
  check::ShapeIs(op, "out", out, {T, H});
  check::ShapeIs(op, "ids", ids, {T, k});
  check::ShapeIs(op, "weights", weights, {T, k});
  VT_CHECK(k >= 1, op, ": ids is ", ids.Describe(), "; each token needs at least one expert");
  VT_CHECK(I >= 1 && w_gate_up.dim(1) == H && w_gate_up.dim(0) % (2 * I) == 0 && w_gate_up.dim(0) > 0, op,
           ": w_gate_up is ", w_gate_up.Describe(), " but x has H=", H, " and w_down ", w_down.Describe(),
           " has I=", I, "; w_gate_up must be [E * 2I, H]");
  const int64_t E = w_gate_up.dim(0) / (2 * I);
  VT_CHECK(w_down.dim(0) == E * H, op, ": w_down is ", w_down.Describe(), " but w_gate_up ", w_gate_up.Describe(),
           " holds E=", E, " experts of H=", H, "; w_down must be [E * H, I] = [", E * H, ", ", I, "]");
  return E;
}

// A per-expert F32 scale operand [E] and its name.
struct ExpertScales {
  const char* name;
  const Tensor* t;
};

// The FP8 expert ops' operands: e4m3fn x8 and weights in MoeExperts' layout, and one F32
// scale per expert for each projection.
void CheckFp8Experts(std::string_view op, const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& ids,
                     const Tensor& weights, const Tensor& w_gate_up, ExpertScales gate_up, const Tensor& w_down,
                     ExpertScales down) {
  check::Operand(op, q, "x8", x8, {DType::kF8E4M3});
  check::Operand(op, q, "w_gate_up", w_gate_up, {DType::kF8E4M3});
  check::Operand(op, q, "w_down", w_down, {DType::kF8E4M3});
  const int64_t E = CheckExperts(op, q, out, x8, ids, weights, w_gate_up, w_down);
  for (const ExpertScales& s : {gate_up, down}) {
    check::Operand(op, q, s.name, *s.t, {DType::kF32});
    check::ShapeIs(op, s.name, *s.t, {E});
  }
}

}  // namespace

void MoeExperts(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                const Tensor& w_gate_up, const Tensor& w_down) {
  constexpr std::string_view op = "MoeExperts";
  check::Operand(op, q, "x", x, {DType::kF32, DType::kBF16});
  check::Operand(op, q, "w_gate_up", w_gate_up, {DType::kBF16, DType::kF32});
  check::Operand(op, q, "w_down", w_down, {w_gate_up.dtype()});
  CheckExperts(op, q, out, x, ids, weights, w_gate_up, w_down);
  VT_CHECK(out.dtype() == x.dtype(), op, ": out is ", out.Describe(), " but x is ", x.Describe(),
           "; out takes the activation dtype of x");
  Kernel<OpId::kMoeExperts>(q.device().type)(q, out, x, ids, weights, w_gate_up, w_down);
}

void MoeExpertsFp8(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& ids, const Tensor& weights,
                   const Tensor& w_gate_up, const Tensor& alpha_gate_up, const Tensor& w_down,
                   float down_input_scale, const Tensor& alpha_down) {
  constexpr std::string_view op = "MoeExpertsFp8";
  CheckFp8Experts(op, q, out, x8, ids, weights, w_gate_up, {"alpha_gate_up", &alpha_gate_up}, w_down,
                  {"alpha_down", &alpha_down});
  check::PositiveFinite(op, "down_input_scale", down_input_scale);
  Kernel<OpId::kMoeExpertsFp8>(q.device().type)(q, out, x8, ids, weights, w_gate_up, alpha_gate_up, w_down,
                                                 down_input_scale, alpha_down);
}

void MoeExpertsFp8PerToken(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& x_scales,
                           const Tensor& ids, const Tensor& weights, const Tensor& w_gate_up,
                           const Tensor& w_scale_gate_up, const Tensor& w_down, const Tensor& w_scale_down) {
  constexpr std::string_view op = "MoeExpertsFp8PerToken";
  CheckFp8Experts(op, q, out, x8, ids, weights, w_gate_up, {"w_scale_gate_up", &w_scale_gate_up}, w_down,
                  {"w_scale_down", &w_scale_down});
  check::Operand(op, q, "x_scales", x_scales, {DType::kF32});
  check::ShapeIs(op, "x_scales", x_scales, {x8.dim(0), 1});
  Kernel<OpId::kMoeExpertsFp8PerToken>(q.device().type)(q, out, x8, x_scales, ids, weights, w_gate_up,
                                                         w_scale_gate_up, w_down, w_scale_down);
}

void MoeExpertsFp8GroupScaled(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& x_scales,
                              const Tensor& ids, const Tensor& weights, const Tensor& w_gate_up,
                              const Tensor& s_gate_up, const Tensor& w_down, const Tensor& s_down, int64_t block_n,
                              int64_t block_k, float amax_floor, float scale_floor) {
  constexpr std::string_view op = "MoeExpertsFp8GroupScaled";
  check::Operand(op, q, "x8", x8, {DType::kF8E4M3});
  check::Operand(op, q, "w_gate_up", w_gate_up, {DType::kF8E4M3});
  check::Operand(op, q, "w_down", w_down, {DType::kF8E4M3});
  const int64_t E = CheckExperts(op, q, out, x8, ids, weights, w_gate_up, w_down);
  VT_CHECK(block_n >= 1 && block_k >= 1, op, ": block_n and block_k must be >= 1, got ", block_n, " and ", block_k);
  check::Finite(op, "amax_floor", amax_floor);
  check::Finite(op, "scale_floor", scale_floor);
  VT_CHECK(amax_floor >= 0.0f && scale_floor >= 0.0f && (amax_floor > 0.0f || scale_floor > 0.0f), op,
           ": amax_floor and scale_floor must be >= 0 and not both 0, got ", amax_floor, " and ", scale_floor);
  const int64_t T = x8.dim(0), H = x8.dim(1), I = w_down.dim(1);
  auto ceil = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const int64_t nI = ceil(I, block_n), nH = ceil(H, block_n), GH = ceil(H, block_k), GI = ceil(I, block_k);
  check::Operand(op, q, "x_scales", x_scales, {DType::kF32});
  check::ShapeIs(op, "x_scales", x_scales, {T, GH});
  check::Operand(op, q, "s_gate_up", s_gate_up, {DType::kF32});
  VT_CHECK(s_gate_up.ndim() == 2 && s_gate_up.dim(0) == E * 2 * nI && s_gate_up.dim(1) == GH, op, ": s_gate_up is ",
           s_gate_up.Describe(), " but must be [E * 2 * ceil(I/block_n), ceil(H/block_k)] = [", E * 2 * nI, ", ", GH,
           "] (per expert ", nI, " gate scale rows then ", nI, " up scale rows; E=", E, ", I=", I, ", H=", H,
           ", block_n=", block_n, ", block_k=", block_k, ")");
  check::Operand(op, q, "s_down", s_down, {DType::kF32});
  VT_CHECK(s_down.ndim() == 2 && s_down.dim(0) == E * nH && s_down.dim(1) == GI, op, ": s_down is ",
           s_down.Describe(), " but must be [E * ceil(H/block_n), ceil(I/block_k)] = [", E * nH, ", ", GI,
           "] (E=", E, ", H=", H, ", I=", I, ", block_n=", block_n, ", block_k=", block_k, ")");
  Kernel<OpId::kMoeExpertsFp8GroupScaled>(q.device().type)(q, out, x8, x_scales, ids, weights, w_gate_up, s_gate_up,
                                                            w_down, s_down, block_n, block_k, amax_floor,
                                                            scale_floor);
}

}  // namespace vt
