// CPU MatmulFp8 and Matmul.
#include "vt/cpu/backend.h"
#include "vt/cpu/reference.h"
#include "vt/ops/matmul.h"

namespace vt::cpu {

namespace {
void MatmulFp8Cpu(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                  const Tensor* bias) {
  Cpu(q).pool.ParallelFor(a.dim(0), 1, [&](int64_t m0, int64_t m1) { ref::MatmulFp8(out, a, b, alpha, bias, m0, m1); });
}

void MatmulCpu(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, const Tensor* bias) {
  Cpu(q).pool.ParallelFor(a.dim(0), 1, [&](int64_t m0, int64_t m1) { ref::Matmul(out, a, b, bias, m0, m1); });
}
}  // namespace

void RegisterMatmulKernels() {
  Register<OpId::kMatmulFp8>(DeviceType::kCPU, &MatmulFp8Cpu);
  Register<OpId::kMatmul>(DeviceType::kCPU, &MatmulCpu);
}

}  // namespace vt::cpu
