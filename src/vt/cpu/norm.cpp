// CPU RmsNorm and RmsNormGated.
#include "vt/cpu/backend.h"
#include "vt/cpu/reference.h"
#include "vt/ops/norm.h"

namespace vt::cpu {

namespace {
void RmsNormCpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                const Tensor* residual) {
  Cpu(q).pool.ParallelFor(ref::Rows(x), 1, [&](int64_t r0, int64_t r1) {
    ref::RmsNorm(out, x, weight, eps, residual, r0, r1);
  });
}

void RmsNormGatedCpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight,
                     float eps) {
  Cpu(q).pool.ParallelFor(ref::Rows(x), 1, [&](int64_t r0, int64_t r1) {
    ref::RmsNormGated(out, x, gate, weight, eps, r0, r1);
  });
}
}  // namespace

void RegisterNormKernels() {
  Register<OpId::kRmsNorm>(DeviceType::kCPU, &RmsNormCpu);
  Register<OpId::kRmsNormGated>(DeviceType::kCPU, &RmsNormGatedCpu);
}

}  // namespace vt::cpu
