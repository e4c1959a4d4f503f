// CPU SiluMul: the vector kernel of the queue's ISA, or the scalar reference; SigmoidGatedAdd.
#include "vt/cpu/reference.h"
#include "vt/cpu/row_ops.h"
#include "vt/ops/activation.h"

namespace vt::cpu {

namespace {
void SiluMulCpu(const Queue& q, const Tensor& out, const Tensor& x) {
  const elementwise::RowArgs a = RowArgsOf(x, out, out.dim(-1));
  RunRows(q, ref::Rows(out), &elementwise::KernelSet::silu_mul, a,
          [&](int64_t r0, int64_t r1) { ref::SiluMul(out, x, r0, r1); });
}
// Rows split across the pool; the scalar arithmetic is the definition (a gate is rare: one
// per layer, next to the GEMMs that feed it).
void SigmoidGatedAddCpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor* base) {
  Cpu(q).pool.ParallelFor(x.dim(0), 1, [&](int64_t r0, int64_t r1) { ref::SigmoidGatedAdd(out, x, gate, base, r0, r1); });
}
}  // namespace

void RegisterActivationKernels() {
  Register<OpId::kSiluMul>(DeviceType::kCPU, &SiluMulCpu);
  Register<OpId::kSigmoidGatedAdd>(DeviceType::kCPU, &SigmoidGatedAddCpu);
}

}  // namespace vt::cpu
