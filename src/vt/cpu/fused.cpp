// CPU fused recipes. The vector kernels normalise (or activate) each row, round it to the
// recipe's BF16 intermediate and quantize it in one pass. The scalar path runs the
// reference of each step on a BF16 row buffer. Both use the arithmetic of the standalone
// kernels, so the bytes equal FusedChainComposite's.
#include "vt/cpu/backend.h"
#include "vt/cpu/elementwise_kernels.h"
#include "vt/cpu/reference.h"
#include "vt/ops/fused.h"
#include "vt/ops/matmul.h"

namespace vt::cpu {

namespace {

// Scalar path: `produce(dst, r0, r1)` writes rows [r0, r1) into a BF16 buffer (or the
// caller's normed_out rows), which are then quantized into out's rows.
template <typename Produce>
void ScalarPerRow(const Queue& q, const Tensor& out, int64_t rows, int64_t width, float input_scale,
                  const Tensor* normed_out, Produce produce) {
  Cpu(q).pool.ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) {
    Tensor tmp = Tensor::Empty({r1 - r0, width}, DType::kBF16, Device::Cpu());
    Tensor dst = normed_out ? normed_out->View({rows, width}).Slice(0, r0, r1) : tmp;
    produce(dst, r0, r1);
    Tensor out_rows = out.View({rows, width}).Slice(0, r0, r1);
    ref::QuantFp8Static(out_rows, dst, input_scale, 0, (r1 - r0) * width);
  });
}

// The row-kernel arguments shared by the vector paths.
elementwise::RowArgs FusedArgs(const Tensor& out, const Tensor& x, float input_scale) {
  elementwise::RowArgs a;
  a.x = x.data();
  a.x_dtype = x.dtype();
  a.fp8_out = out.data_as<uint8_t>();
  a.out_dtype = DType::kBF16;
  a.input_scale = input_scale;
  return a;
}

void RmsNormQuantFp8Cpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                        float input_scale, const Tensor* residual, const Tensor* normed_out) {
  const int64_t H = x.dim(-1), rows = ref::Rows(x);
  CpuQueue& cpu = Cpu(q);
  if (const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa)) {
    elementwise::RowArgs a = FusedArgs(out, x, input_scale);
    a.weight = weight.data();
    a.weight_dtype = weight.dtype();
    a.residual = residual != nullptr ? residual->data() : nullptr;
    a.out = normed_out != nullptr ? normed_out->data() : nullptr;
    a.width = H;
    a.eps = eps;
    cpu.pool.ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) { vec->rms_norm(a, r0, r1); });
    return;
  }
  ScalarPerRow(q, out, rows, H, input_scale, normed_out, [&](const Tensor& dst, int64_t r0, int64_t r1) {
    Tensor xr = x.View({rows, H}).Slice(0, r0, r1);
    Tensor rr = residual ? residual->View({rows, H}).Slice(0, r0, r1) : Tensor();
    ref::RmsNorm(dst, xr, weight, eps, residual ? &rr : nullptr, 0, r1 - r0);
  });
}

void RmsNormGatedQuantFp8Cpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate,
                             const Tensor& weight, float eps, float input_scale) {
  const int64_t H = x.dim(-1), rows = ref::Rows(x);
  CpuQueue& cpu = Cpu(q);
  if (const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa)) {
    elementwise::RowArgs a = FusedArgs(out, x, input_scale);
    a.weight = weight.data();
    a.weight_dtype = weight.dtype();
    a.gate = gate.data();
    a.gate_dtype = gate.dtype();
    a.width = H;
    a.eps = eps;
    cpu.pool.ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) { vec->rms_norm_gated(a, r0, r1); });
    return;
  }
  ScalarPerRow(q, out, rows, H, input_scale, nullptr, [&](const Tensor& dst, int64_t r0, int64_t r1) {
    Tensor xr = x.View({rows, H}).Slice(0, r0, r1);
    Tensor gr = gate.View({rows, H}).Slice(0, r0, r1);
    ref::RmsNormGated(dst, xr, gr, weight, eps, 0, r1 - r0);
  });
}

void SiluMulQuantFp8Cpu(const Queue& q, const Tensor& out, const Tensor& x, float input_scale) {
  const int64_t I = out.dim(-1), rows = ref::Rows(out);
  CpuQueue& cpu = Cpu(q);
  if (const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa)) {
    elementwise::RowArgs a = FusedArgs(out, x, input_scale);
    a.width = I;
    cpu.pool.ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) { vec->silu_mul(a, r0, r1); });
    return;
  }
  ScalarPerRow(q, out, rows, I, input_scale, nullptr, [&](const Tensor& dst, int64_t r0, int64_t r1) {
    Tensor xr = x.View({rows, 2 * I}).Slice(0, r0, r1);
    ref::SiluMul(dst, xr, 0, r1 - r0);
  });
}

// The product into BF16, then SiLU-mul and quantization (the op's definition), each on
// this queue's level.
void MatmulFp8SiluMulQuantFp8Cpu(const Queue& q, const Tensor& out8, const Tensor& gate_up, const Tensor& x8,
                                 const Tensor& w_gate_up, float alpha, float input_scale) {
  MatmulFp8(q, gate_up, x8, w_gate_up, alpha);
  SiluMulQuantFp8(q, out8, gate_up, input_scale);
}

}  // namespace

void RegisterFusedKernels() {
  Register<OpId::kRmsNormQuantFp8>(DeviceType::kCPU, &RmsNormQuantFp8Cpu);
  Register<OpId::kRmsNormGatedQuantFp8>(DeviceType::kCPU, &RmsNormGatedQuantFp8Cpu);
  Register<OpId::kSiluMulQuantFp8>(DeviceType::kCPU, &SiluMulQuantFp8Cpu);
  Register<OpId::kMatmulFp8SiluMulQuantFp8>(DeviceType::kCPU, &MatmulFp8SiluMulQuantFp8Cpu);
}

}  // namespace vt::cpu
