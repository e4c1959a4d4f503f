// CUDA Cast between F32/BF16/F16/F8E4M3 and F32/BF16/F16, element-wise, with the dtype
// conversions of vt/dtype.h (the CPU kernels' own), so the bytes match.
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/ops/cast.h"

namespace vt::cuda {

namespace {

__global__ void CastKernel(void* out, DType od, const void* x, DType xd, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    StoreAny(out, od, i, LoadAny(x, xd, i));
}

void CastCuda(const Queue& q, const Tensor& out, const Tensor& x) {
  CudaQueue& cq = Cuda(q);
  const int64_t n = x.numel();
  if (n == 0) return;
  DeviceGuard guard(cq.device.index);
  CastKernel<<<GridFor(n, 256, cq), 256, 0, cq.stream>>>(out.data(), out.dtype(), x.data(), x.dtype(), n);
  VT_CUDA_CHECK_LAUNCH("CastKernel");
}

}  // namespace

void RegisterCastKernels() { Register<OpId::kCast>(DeviceType::kCUDA, &CastCuda); }

}  // namespace vt::cuda
