// CPU SiluMul.
#include "vt/cpu/backend.h"
#include "vt/cpu/reference.h"
#include "vt/ops/activation.h"

namespace vt::cpu {

namespace {
void SiluMulCpu(const Queue& q, const Tensor& out, const Tensor& x) {
  Cpu(q).pool.ParallelFor(ref::Rows(out), 1, [&](int64_t r0, int64_t r1) { ref::SiluMul(out, x, r0, r1); });
}
}  // namespace

void RegisterActivationKernels() { Register<OpId::kSiluMul>(DeviceType::kCPU, &SiluMulCpu); }

}  // namespace vt::cpu
