// CUDA SiluMul and SigmoidGatedAdd: element-wise, with the CPU kernels' arithmetic (numerics::Silu and the
// dtype conversions of vt/dtype.h), so the bytes match.
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/cuda/rows.h"
#include "vt/ops/activation.h"

namespace vt::cuda {

namespace {

__global__ void SiluMulKernel(void* out, DType od, const void* x, DType xd, int64_t rows, int64_t I, uint8_t* q,
                              float q_inv) {
  PdlWait();
  const int64_t n = rows * I;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t r = e / I, i = e - r * I;
    const float g = LoadAny(x, xd, r * 2 * I + i);
    const float u = LoadAny(x, xd, r * 2 * I + I + i);
    const float y = numerics::Silu(g) * u;
    if (out != nullptr) StoreAny(out, od, e, y);
    if (q != nullptr) q[e] = QuantizeFp8KeepNan(RoundAny(od, y), q_inv);
  }
}

void SiluMulCuda(const Queue& q, const Tensor& out, const Tensor& x) {
  const int64_t I = out.dim(-1);
  LaunchSiluMul(Cuda(q), out.data(), out.dtype(), x.data(), x.dtype(), I == 0 ? 0 : out.numel() / I, I, nullptr,
                0.0f);
}

__global__ void SigmoidGatedAddKernel(void* out, const void* x, DType xd, const void* gate, DType gd, int64_t G,
                                      const void* base, int64_t R, int64_t C) {
  PdlWait();
  const int64_t n = R * C;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t r = e / C, c = e - r * C;
    const float g = LoadAny(gate, gd, r * G + (G == 1 ? 0 : c));
    const float s = 1.0f / (1.0f + numerics::Exp(-g));
    const float b = base != nullptr ? LoadAny(base, xd, e) : 0.0f;
    StoreAny(out, xd, e, b + s * LoadAny(x, xd, e));
  }
}

void SigmoidGatedAddCuda(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor* base) {
  const int64_t R = x.dim(0), C = x.dim(1);
  if (R * C == 0) return;
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  LaunchOverlapped(cq, "SigmoidGatedAddKernel", SigmoidGatedAddKernel, GridFor(R * C, 256, cq), 256, 0, out.data(),
                   x.data(), x.dtype(), gate.data(), gate.dtype(), gate.dim(1),
                   base != nullptr ? base->data() : nullptr, R, C);
}

}  // namespace

void LaunchSiluMul(CudaQueue& cq, void* out, DType od, const void* x, DType xd, int64_t rows, int64_t I, uint8_t* q,
                   float q_inv) {
  if (rows * I == 0) return;
  DeviceGuard guard(cq.device.index);
  LaunchOverlapped(cq, "SiluMulKernel", SiluMulKernel, GridFor(rows * I, 256, cq), 256, 0, out, od, x, xd, rows, I, q,
                   q_inv);
}

void RegisterActivationKernels() {
  Register<OpId::kSiluMul>(DeviceType::kCUDA, &SiluMulCuda);
  Register<OpId::kSigmoidGatedAdd>(DeviceType::kCUDA, &SigmoidGatedAddCuda);
}

}  // namespace vt::cuda
