// CPU SiluMul: the vector kernel of the queue's ISA, or the scalar reference.
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
}  // namespace

void RegisterActivationKernels() { Register<OpId::kSiluMul>(DeviceType::kCPU, &SiluMulCpu); }

}  // namespace vt::cpu
