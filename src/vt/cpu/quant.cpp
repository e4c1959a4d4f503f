// CPU QuantFp8Static.
#include "vt/cpu/backend.h"
#include "vt/cpu/reference.h"
#include "vt/ops/quant.h"

namespace vt::cpu {

namespace {
void QuantFp8StaticCpu(const Queue& q, const Tensor& out, const Tensor& x, float input_scale) {
  Cpu(q).pool.ParallelFor(x.numel(), 4096, [&](int64_t b, int64_t e) {
    ref::QuantFp8Static(out, x, input_scale, b, e);
  });
}
}  // namespace

void RegisterQuantKernels() { Register<OpId::kQuantFp8Static>(DeviceType::kCPU, &QuantFp8StaticCpu); }

}  // namespace vt::cpu
