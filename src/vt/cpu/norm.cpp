// CPU RmsNorm and RmsNormGated: the vector kernels of the queue's ISA, or the scalar
// reference; rows are split across the pool.
#include "vt/cpu/backend.h"
#include "vt/cpu/elementwise_kernels.h"
#include "vt/cpu/reference.h"
#include "vt/ops/norm.h"

namespace vt::cpu {

namespace {
void RmsNormCpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                const Tensor* residual) {
  CpuQueue& cpu = Cpu(q);
  const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa);
  elementwise::RowArgs a;
  a.x = x.data();
  a.x_dtype = x.dtype();
  a.weight = weight.data();
  a.weight_dtype = weight.dtype();
  a.residual = residual != nullptr ? residual->data() : nullptr;
  a.out = out.data();
  a.out_dtype = out.dtype();
  a.width = x.dim(-1);
  a.eps = eps;
  cpu.pool.ParallelFor(ref::Rows(x), 1, [&](int64_t r0, int64_t r1) {
    if (vec != nullptr)
      vec->rms_norm(a, r0, r1);
    else
      ref::RmsNorm(out, x, weight, eps, residual, r0, r1);
  });
}

void RmsNormGatedCpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight,
                     float eps) {
  CpuQueue& cpu = Cpu(q);
  const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa);
  elementwise::RowArgs a;
  a.x = x.data();
  a.x_dtype = x.dtype();
  a.weight = weight.data();
  a.weight_dtype = weight.dtype();
  a.gate = gate.data();
  a.gate_dtype = gate.dtype();
  a.out = out.data();
  a.out_dtype = out.dtype();
  a.width = x.dim(-1);
  a.eps = eps;
  cpu.pool.ParallelFor(ref::Rows(x), 1, [&](int64_t r0, int64_t r1) {
    if (vec != nullptr)
      vec->rms_norm_gated(a, r0, r1);
    else
      ref::RmsNormGated(out, x, gate, weight, eps, r0, r1);
  });
}
}  // namespace

void RegisterNormKernels() {
  Register<OpId::kRmsNorm>(DeviceType::kCPU, &RmsNormCpu);
  Register<OpId::kRmsNormGated>(DeviceType::kCPU, &RmsNormGatedCpu);
}

}  // namespace vt::cpu
