// CPU Gated DeltaNet ops: the scalar definitions of cpu/gdn_reference.cpp (the same on every
// ISA level), the conv split across channels, the delta rule across (sequence, value head)
// pairs. The delta rule runs whichever form the caller asks for (chunk_size 0: token by
// token; > 0: HF's chunked form): on the CPU the recurrence costs the same O(dk·dv) per token
// and head as the chunked form, without its O(chunk²) extra work, so a model should ask for 0.
#include "vt/cpu/backend.h"
#include "vt/cpu/reference.h"
#include "vt/ops/gdn.h"

namespace vt::cpu {

namespace {

void CausalConv1dCpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight,
                     const Tensor& conv_state, const Tensor& query_start, const Tensor& state_slots) {
  ref::CheckGdnBatch("CausalConv1d", query_start, state_slots, x.dim(0), conv_state.dim(0));
  Cpu(q).pool.ParallelFor(x.dim(1), 8, [&](int64_t c0, int64_t c1) {
    ref::CausalConv1d(out, x, weight, conv_state, query_start, state_slots, c0, c1);
  });
}

void GatedDeltaRuleCpu(const Queue& q, const Tensor& out, const Tensor& query, const Tensor& key,
                       const Tensor& value, const Tensor& a, const Tensor& b, const Tensor& A_log,
                       const Tensor& dt_bias, const Tensor& state, const Tensor& query_start,
                       const Tensor& state_slots, int chunk_size) {
  ref::CheckGdnBatch("GatedDeltaRule", query_start, state_slots, query.dim(0), state.dim(0));
  Cpu(q).pool.ParallelFor(state_slots.dim(0) * value.dim(1), 1, [&](int64_t w0, int64_t w1) {
    ref::GatedDeltaRule(out, query, key, value, a, b, A_log, dt_bias, state, query_start, state_slots, chunk_size,
                        w0, w1);
  });
}

}  // namespace

void RegisterGdnKernels() {
  Register<OpId::kCausalConv1d>(DeviceType::kCPU, &CausalConv1dCpu);
  Register<OpId::kGatedDeltaRule>(DeviceType::kCPU, &GatedDeltaRuleCpu);
}

}  // namespace vt::cpu
