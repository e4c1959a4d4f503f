// CPU QuantFp8Static: the vector kernel of the queue's ISA, or the scalar reference.
#include "vt/cpu/backend.h"
#include "vt/cpu/elementwise_kernels.h"
#include "vt/cpu/reference.h"
#include "vt/ops/quant.h"

namespace vt::cpu {

namespace {
// Elements per parallel block: large enough to amortise the hand-off, small enough to
// split a decode-sized activation across threads.
constexpr int64_t kGrain = 16384;

void QuantFp8StaticCpu(const Queue& q, const Tensor& out, const Tensor& x, float input_scale) {
  CpuQueue& cpu = Cpu(q);
  const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa);
  cpu.pool.ParallelFor(x.numel(), kGrain, [&](int64_t b, int64_t e) {
    if (vec != nullptr)
      vec->quant_fp8(x.data(), x.dtype(), out.data_as<uint8_t>(), b, e, input_scale);
    else
      ref::QuantFp8Static(out, x, input_scale, b, e);
  });
}
}  // namespace

void RegisterQuantKernels() { Register<OpId::kQuantFp8Static>(DeviceType::kCPU, &QuantFp8StaticCpu); }

}  // namespace vt::cpu
