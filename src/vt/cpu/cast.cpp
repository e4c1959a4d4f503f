// CPU Cast: the vector kernel of the queue's ISA from F32/BF16/F16/F8E4M3 to F32/BF16/F16;
// the scalar ISA uses the reference.
#include "vt/cpu/backend.h"
#include "vt/cpu/elementwise_kernels.h"
#include "vt/cpu/reference.h"
#include "vt/ops/cast.h"

namespace vt::cpu {

namespace {
constexpr int64_t kGrain = 16384;

void CastCpu(const Queue& q, const Tensor& out, const Tensor& x) {
  CpuQueue& cpu = Cpu(q);
  const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa);
  cpu.pool.ParallelFor(x.numel(), kGrain, [&](int64_t b, int64_t e) {
    if (vec != nullptr)
      vec->cast(x.data(), x.dtype(), out.data(), out.dtype(), b, e);
    else
      ref::Cast(out, x, b, e);
  });
}
}  // namespace

namespace elementwise {
namespace {
thread_local const char* t_last_set = nullptr;
}  // namespace
const KernelSet* Chosen(const KernelSet* set) {
  t_last_set = set != nullptr ? set->name : "scalar";
  return set;
}
const char* LastElementwiseSetOnThisThread() { return t_last_set; }
}  // namespace elementwise

void RegisterCastKernels() { Register<OpId::kCast>(DeviceType::kCPU, &CastCpu); }

}  // namespace vt::cpu
