// CUDA fused recipes: the row kernels of norm.cu and activation.cu with their BF16 result
// quantized in the same pass, byte-identical to FusedChainComposite (BF16 intermediate,
// then QuantFp8Static with the reciprocal formed once in f32).
#include "vt/cuda/kernels.h"
#include "vt/cuda/matmul.h"
#include "vt/cuda/rows.h"
#include "vt/ops/fused.h"
#include "vt/ops/matmul.h"

namespace vt::cuda {

namespace {

// RmsNormQuantFp8 (kZeroCentred false) and RmsNormZeroCentredQuantFp8.
template <bool kZeroCentred>
void NormQuantFp8Cuda(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                      float input_scale, const Tensor* residual, const Tensor* normed_out) {
  const int64_t H = x.dim(-1), rows = x.numel() / H;
  LaunchRmsNorm(Cuda(q), normed_out ? normed_out->data() : nullptr, DType::kBF16, x.data(), x.dtype(),
                weight.data(), weight.dtype(), residual ? residual->data() : nullptr, rows, H, eps,
                out.data_as<uint8_t>(), 1.0f / input_scale, kZeroCentred);
}

void RmsNormGatedQuantFp8Cuda(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate,
                              const Tensor& weight, float eps, float input_scale) {
  const int64_t H = x.dim(-1), rows = x.numel() / H;
  LaunchRmsNormGated(Cuda(q), nullptr, DType::kBF16, x.data(), x.dtype(), gate.data(), gate.dtype(), weight.data(),
                     weight.dtype(), rows, H, eps, out.data_as<uint8_t>(), 1.0f / input_scale);
}

void SiluMulQuantFp8Cuda(const Queue& q, const Tensor& out, const Tensor& x, float input_scale) {
  const int64_t I = out.dim(-1);
  LaunchSiluMul(Cuda(q), nullptr, DType::kBF16, x.data(), x.dtype(), I == 0 ? 0 : out.numel() / I, I,
                out.data_as<uint8_t>(), 1.0f / input_scale);
}

#ifdef VT_CUDA_FP8
// One row (decode) whose product the GEMV takes: SiLU-mul and quantization in the GEMV's
// epilogue (matmul_gemv.cu). Otherwise the two ops in sequence.
void MatmulFp8SiluMulQuantFp8Cuda(const Queue& q, const Tensor& out8, const Tensor& gate_up, const Tensor& x8,
                                  const Tensor& w_gate_up, float alpha, float input_scale) {
  if (SiluGemvFits(x8, w_gate_up))
    return MatmulFp8GemvSiluMulQuant(q, out8, gate_up, x8, w_gate_up, alpha, input_scale);
  MatmulFp8(q, gate_up, x8, w_gate_up, alpha);
  SiluMulQuantFp8(q, out8, gate_up, input_scale);
}
#endif

}  // namespace

void RegisterFusedKernels() {
  Register<OpId::kRmsNormQuantFp8>(DeviceType::kCUDA, &NormQuantFp8Cuda<false>);
  Register<OpId::kRmsNormZeroCentredQuantFp8>(DeviceType::kCUDA, &NormQuantFp8Cuda<true>);
  Register<OpId::kRmsNormGatedQuantFp8>(DeviceType::kCUDA, &RmsNormGatedQuantFp8Cuda);
  Register<OpId::kSiluMulQuantFp8>(DeviceType::kCUDA, &SiluMulQuantFp8Cuda);
#ifdef VT_CUDA_FP8
  Register<OpId::kMatmulFp8SiluMulQuantFp8>(DeviceType::kCUDA, &MatmulFp8SiluMulQuantFp8Cuda);
#endif
}

}  // namespace vt::cuda
