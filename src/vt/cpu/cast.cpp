// CPU Cast.
#include "vt/cpu/backend.h"
#include "vt/cpu/reference.h"
#include "vt/ops/cast.h"

namespace vt::cpu {

namespace {
void CastCpu(const Queue& q, const Tensor& out, const Tensor& x) {
  Cpu(q).pool.ParallelFor(x.numel(), 4096, [&](int64_t b, int64_t e) { ref::Cast(out, x, b, e); });
}
}  // namespace

void RegisterCastKernels() { Register<OpId::kCast>(DeviceType::kCPU, &CastCpu); }

}  // namespace vt::cpu
