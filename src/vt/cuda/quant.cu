// CUDA QuantFp8Static: byte-identical to the CPU kernel (numerics::QuantizeFp8 with the
// reciprocal formed once, in f32, on the host).
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/ops/quant.h"

namespace vt::cuda {

namespace {

__global__ void QuantFp8Kernel(uint8_t* out, const void* x, DType xd, int64_t n, float inv) {
  PdlWait();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = QuantizeFp8KeepNan(LoadAny(x, xd, i), inv);
}

void QuantFp8StaticCuda(const Queue& q, const Tensor& out, const Tensor& x, float input_scale) {
  CudaQueue& cq = Cuda(q);
  const int64_t n = x.numel();
  if (n == 0) return;
  const float inv = 1.0f / input_scale;
  DeviceGuard guard(cq.device.index);
  LaunchOverlapped(cq, "QuantFp8Kernel", QuantFp8Kernel, GridFor(n, 256, cq), 256, 0, out.data_as<uint8_t>(), x.data(),
                   x.dtype(), n, inv);
}

}  // namespace

void RegisterQuantKernels() { Register<OpId::kQuantFp8Static>(DeviceType::kCUDA, &QuantFp8StaticCuda); }

}  // namespace vt::cuda
