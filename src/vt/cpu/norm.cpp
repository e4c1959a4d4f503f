// CPU RmsNorm, RmsNormZeroCentred and RmsNormGated: the vector kernels of the queue's ISA, or the scalar
// reference; rows are split across the pool.
#include "vt/cpu/backend.h"
#include "vt/cpu/reference.h"
#include "vt/cpu/row_ops.h"
#include "vt/ops/norm.h"

namespace vt::cpu {

namespace {
void RmsNormCpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                const Tensor* residual) {
  elementwise::RowArgs a = RowArgsOf(x, out, x.dim(-1));
  SetWeight(a, weight, eps);
  a.residual = residual != nullptr ? residual->data() : nullptr;
  RunRows(q, ref::Rows(x), &elementwise::KernelSet::rms_norm, a,
          [&](int64_t r0, int64_t r1) { ref::RmsNorm(out, x, weight, eps, residual, r0, r1); });
}

void RmsNormGatedCpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight,
                     float eps) {
  elementwise::RowArgs a = RowArgsOf(x, out, x.dim(-1));
  SetWeight(a, weight, eps);
  a.gate = gate.data();
  a.gate_dtype = gate.dtype();
  RunRows(q, ref::Rows(x), &elementwise::KernelSet::rms_norm_gated, a,
          [&](int64_t r0, int64_t r1) { ref::RmsNormGated(out, x, gate, weight, eps, r0, r1); });
}

void RmsNormZeroCentredCpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                           const Tensor* residual) {
  elementwise::RowArgs a = RowArgsOf(x, out, x.dim(-1));
  SetWeight(a, weight, eps);
  a.residual = residual != nullptr ? residual->data() : nullptr;
  a.zero_centred = true;
  RunRows(q, ref::Rows(x), &elementwise::KernelSet::rms_norm, a,
          [&](int64_t r0, int64_t r1) { ref::RmsNormZeroCentred(out, x, weight, eps, residual, r0, r1); });
}
}  // namespace

void RegisterNormKernels() {
  Register<OpId::kRmsNorm>(DeviceType::kCPU, &RmsNormCpu);
  Register<OpId::kRmsNormGated>(DeviceType::kCPU, &RmsNormGatedCpu);
  Register<OpId::kRmsNormZeroCentred>(DeviceType::kCPU, &RmsNormZeroCentredCpu);
}

}  // namespace vt::cpu
