// CPU SiluMul: the vector kernel of the queue's ISA, or the scalar reference.
#include "vt/cpu/backend.h"
#include "vt/cpu/elementwise_kernels.h"
#include "vt/cpu/reference.h"
#include "vt/ops/activation.h"

namespace vt::cpu {

namespace {
void SiluMulCpu(const Queue& q, const Tensor& out, const Tensor& x) {
  CpuQueue& cpu = Cpu(q);
  const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa);
  elementwise::RowArgs a;
  a.x = x.data();
  a.x_dtype = x.dtype();
  a.out = out.data();
  a.out_dtype = out.dtype();
  a.width = out.dim(-1);
  cpu.pool.ParallelFor(ref::Rows(out), 1, [&](int64_t r0, int64_t r1) {
    if (vec != nullptr)
      vec->silu_mul(a, r0, r1);
    else
      ref::SiluMul(out, x, r0, r1);
  });
}
}  // namespace

void RegisterActivationKernels() { Register<OpId::kSiluMul>(DeviceType::kCPU, &SiluMulCpu); }

}  // namespace vt::cpu
