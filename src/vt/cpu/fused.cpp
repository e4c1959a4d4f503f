// CPU fused recipes: each row is normalised (or activated) into a BF16 row buffer and
// quantized from it in the same pass, with the arithmetic of the standalone kernels, so
// the bytes equal FusedChainComposite's.
#include <vector>

#include "vt/cpu/backend.h"
#include "vt/cpu/reference.h"
#include "vt/ops/fused.h"

namespace vt::cpu {

namespace {

// Runs `produce(row_view_out, r)` for each row into a BF16 row (or the caller's
// normed_out row) and quantizes it into out's row.
template <typename Produce>
void PerRow(const Queue& q, const Tensor& out, int64_t rows, int64_t width, float input_scale,
            const Tensor* normed_out, Produce produce) {
  Cpu(q).pool.ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
    Tensor tmp = Tensor::Empty({r1 - r0, width}, DType::kBF16, Device::Cpu());
    Tensor dst = normed_out ? normed_out->View({rows, width}).Slice(0, r0, r1) : tmp;
    produce(dst, r0, r1);
    Tensor out_rows = out.View({rows, width}).Slice(0, r0, r1);
    ref::QuantFp8Static(out_rows, dst, input_scale, 0, (r1 - r0) * width);
  });
}

void RmsNormQuantFp8Cpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                        float input_scale, const Tensor* residual, const Tensor* normed_out) {
  const int64_t H = x.dim(-1), rows = ref::Rows(x);
  PerRow(q, out, rows, H, input_scale, normed_out, [&](const Tensor& dst, int64_t r0, int64_t r1) {
    Tensor xr = x.View({rows, H}).Slice(0, r0, r1);
    Tensor rr = residual ? residual->View({rows, H}).Slice(0, r0, r1) : Tensor();
    ref::RmsNorm(dst, xr, weight, eps, residual ? &rr : nullptr, 0, r1 - r0);
  });
}

void RmsNormGatedQuantFp8Cpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate,
                             const Tensor& weight, float eps, float input_scale) {
  const int64_t H = x.dim(-1), rows = ref::Rows(x);
  PerRow(q, out, rows, H, input_scale, nullptr, [&](const Tensor& dst, int64_t r0, int64_t r1) {
    Tensor xr = x.View({rows, H}).Slice(0, r0, r1);
    Tensor gr = gate.View({rows, H}).Slice(0, r0, r1);
    ref::RmsNormGated(dst, xr, gr, weight, eps, 0, r1 - r0);
  });
}

void SiluMulQuantFp8Cpu(const Queue& q, const Tensor& out, const Tensor& x, float input_scale) {
  const int64_t I = out.dim(-1), rows = ref::Rows(out);
  PerRow(q, out, rows, I, input_scale, nullptr, [&](const Tensor& dst, int64_t r0, int64_t r1) {
    Tensor xr = x.View({rows, 2 * I}).Slice(0, r0, r1);
    ref::SiluMul(dst, xr, 0, r1 - r0);
  });
}

}  // namespace

void RegisterFusedKernels() {
  Register<OpId::kRmsNormQuantFp8>(DeviceType::kCPU, &RmsNormQuantFp8Cpu);
  Register<OpId::kRmsNormGatedQuantFp8>(DeviceType::kCPU, &RmsNormGatedQuantFp8Cpu);
  Register<OpId::kSiluMulQuantFp8>(DeviceType::kCPU, &SiluMulQuantFp8Cpu);
}

}  // namespace vt::cpu
