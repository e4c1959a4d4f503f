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

// RmsNormQuantFp8 (kZeroCentred false) and RmsNormZeroCentredQuantFp8.
template <bool kZeroCentred>
void NormQuantFp8Cpu(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
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
    a.zero_centred = kZeroCentred;
    cpu.pool.ParallelFor(rows, 1, [&](int64_t r0, int64_t r1) { vec->rms_norm(a, r0, r1); });
    return;
  }
  ScalarPerRow(q, out, rows, H, input_scale, normed_out, [&](const Tensor& dst, int64_t r0, int64_t r1) {
    Tensor xr = x.View({rows, H}).Slice(0, r0, r1);
    Tensor rr = residual ? residual->View({rows, H}).Slice(0, r0, r1) : Tensor();
    if constexpr (kZeroCentred)
      ref::RmsNormZeroCentred(dst, xr, weight, eps, residual ? &rr : nullptr, 0, r1 - r0);
    else
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

// ---- the per-token-group recipes ----------------------------------------------------------
//
// The vector kernels are the static recipes' row kernels with RowArgs::fp8_scales set: each
// row's BF16 intermediate is quantized per token and group (QuantGroupsOf, the standalone
// op's vector code). The scalar level runs the references of the two steps (reference.cpp),
// which are what the scalar level of the composite runs.

// Rows per parallel block: about kGroupGrain elements of the row, at least one row.
constexpr int64_t kGroupGrain = 16384;
int64_t GroupGrain(int64_t width) { return width >= kGroupGrain ? 1 : kGroupGrain / width; }

elementwise::RowArgs GroupArgs(const Tensor& out, const Tensor& scales, const Tensor& x, int64_t width,
                               int64_t group_size, float amax_floor, float scale_floor) {
  elementwise::RowArgs a = FusedArgs(out, x, 1.0f);
  a.fp8_scales = scales.data_as<float>();
  a.group_size = group_size;
  a.amax_floor = amax_floor;
  a.scale_floor = scale_floor;
  a.width = width;
  return a;
}

// RmsNormQuantFp8PerTokenGroup (kZeroCentred false) and RmsNormZeroCentredQuantFp8PerTokenGroup.
template <bool kZeroCentred>
void NormQuantFp8PerTokenGroupCpu(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                  const Tensor& weight, float eps, int64_t group_size, float amax_floor,
                                  float scale_floor, const Tensor* residual, const Tensor* normed_out) {
  const int64_t rows = x.dim(0), H = x.dim(1);
  CpuQueue& cpu = Cpu(q);
  if (const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa)) {
    elementwise::RowArgs a = GroupArgs(out, scales, x, H, group_size, amax_floor, scale_floor);
    a.weight = weight.data();
    a.weight_dtype = weight.dtype();
    a.residual = residual != nullptr ? residual->data() : nullptr;
    a.out = normed_out != nullptr ? normed_out->data() : nullptr;
    a.eps = eps;
    a.zero_centred = kZeroCentred;
    cpu.pool.ParallelFor(rows, GroupGrain(H), [&](int64_t r0, int64_t r1) { vec->rms_norm(a, r0, r1); });
    return;
  }
  cpu.pool.ParallelFor(rows, GroupGrain(H), [&](int64_t r0, int64_t r1) {
    ref::RmsNormQuantFp8PerTokenGroup(out, scales, x, weight, eps, group_size, amax_floor, scale_floor, residual,
                                      normed_out, r0, r1, kZeroCentred);
  });
}

void RmsNormGatedQuantFp8PerTokenGroupCpu(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                          const Tensor& gate, const Tensor& weight, float eps, int64_t group_size,
                                          float amax_floor, float scale_floor) {
  const int64_t rows = x.dim(0), H = x.dim(1);
  CpuQueue& cpu = Cpu(q);
  if (const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa)) {
    elementwise::RowArgs a = GroupArgs(out, scales, x, H, group_size, amax_floor, scale_floor);
    a.weight = weight.data();
    a.weight_dtype = weight.dtype();
    a.gate = gate.data();
    a.gate_dtype = gate.dtype();
    a.eps = eps;
    cpu.pool.ParallelFor(rows, GroupGrain(H), [&](int64_t r0, int64_t r1) { vec->rms_norm_gated(a, r0, r1); });
    return;
  }
  cpu.pool.ParallelFor(rows, GroupGrain(H), [&](int64_t r0, int64_t r1) {
    ref::RmsNormGatedQuantFp8PerTokenGroup(out, scales, x, gate, weight, eps, group_size, amax_floor, scale_floor, r0,
                                           r1);
  });
}

void SiluMulQuantFp8PerTokenGroupCpu(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                     int64_t group_size, float amax_floor, float scale_floor) {
  const int64_t rows = out.dim(0), I = out.dim(1);
  CpuQueue& cpu = Cpu(q);
  if (const elementwise::KernelSet* vec = elementwise::ForIsa(cpu.isa)) {
    const elementwise::RowArgs a = GroupArgs(out, scales, x, I, group_size, amax_floor, scale_floor);
    cpu.pool.ParallelFor(rows, GroupGrain(I), [&](int64_t r0, int64_t r1) { vec->silu_mul(a, r0, r1); });
    return;
  }
  cpu.pool.ParallelFor(rows, GroupGrain(I), [&](int64_t r0, int64_t r1) {
    ref::SiluMulQuantFp8PerTokenGroup(out, scales, x, group_size, amax_floor, scale_floor, r0, r1);
  });
}

}  // namespace

void RegisterFusedKernels() {
  Register<OpId::kRmsNormQuantFp8>(DeviceType::kCPU, &NormQuantFp8Cpu<false>);
  Register<OpId::kRmsNormZeroCentredQuantFp8>(DeviceType::kCPU, &NormQuantFp8Cpu<true>);
  Register<OpId::kRmsNormGatedQuantFp8>(DeviceType::kCPU, &RmsNormGatedQuantFp8Cpu);
  Register<OpId::kSiluMulQuantFp8>(DeviceType::kCPU, &SiluMulQuantFp8Cpu);
  Register<OpId::kMatmulFp8SiluMulQuantFp8>(DeviceType::kCPU, &MatmulFp8SiluMulQuantFp8Cpu);
  Register<OpId::kRmsNormQuantFp8PerTokenGroup>(DeviceType::kCPU, &NormQuantFp8PerTokenGroupCpu<false>);
  Register<OpId::kRmsNormZeroCentredQuantFp8PerTokenGroup>(DeviceType::kCPU, &NormQuantFp8PerTokenGroupCpu<true>);
  Register<OpId::kRmsNormGatedQuantFp8PerTokenGroup>(DeviceType::kCPU, &RmsNormGatedQuantFp8PerTokenGroupCpu);
  Register<OpId::kSiluMulQuantFp8PerTokenGroup>(DeviceType::kCPU, &SiluMulQuantFp8PerTokenGroupCpu);
}

}  // namespace vt::cpu
