// CUDA QuantFp8Static: byte-identical to the CPU kernel (numerics::QuantizeFp8 with the
// reciprocal formed once, in f32, on the host).
#include <atomic>

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

// QuantFp8Kernel over 8-element vectors of a 16-bit x (16 bytes in, 8 out).
__global__ void QuantFp8VecKernel(uint2* out, const uint4* x, DType xd, int64_t vecs, float inv) {
  PdlWait();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vecs; i += stride) {
    float f[8];
    Unpack8(x[i], xd, f);
    out[i] = QuantizePack8(f, xd, inv);  // rounding f to xd: the identity
  }
}

std::atomic<int64_t> g_quant_vec_launches{0};

void QuantFp8StaticCuda(const Queue& q, const Tensor& out, const Tensor& x, float input_scale) {
  CudaQueue& cq = Cuda(q);
  const int64_t n = x.numel();
  if (n == 0) return;
  const float inv = 1.0f / input_scale;
  DeviceGuard guard(cq.device.index);
  // Vectors from 131072 elements (as SiluMul's: a step of many rows, such as a prefill's
  // o_proj input), for a 16-bit x of whole aligned vectors.
  if (VecRowsOn() && n >= (int64_t{1} << 17) && n % 8 == 0 && Is16Bit(x.dtype()) && AlignedTo(x.data(), 16) &&
      AlignedTo(out.data(), 8)) {
    g_quant_vec_launches.fetch_add(1, std::memory_order_relaxed);
    LaunchOverlapped(cq, "QuantFp8VecKernel", QuantFp8VecKernel, GridFor(n / 8, 256, cq), 256, 0,
                     static_cast<uint2*>(out.data()), static_cast<const uint4*>(x.data()), x.dtype(), n / 8, inv);
    return;
  }
  LaunchOverlapped(cq, "QuantFp8Kernel", QuantFp8Kernel, GridFor(n, 256, cq), 256, 0, out.data_as<uint8_t>(), x.data(),
                   x.dtype(), n, inv);
}

// QuantFp8PerTokenGroup: one CTA per (row, group). The threads take the group's elements
// in strides for the amax (max of magnitudes, NaN left out: exact in any order, so the
// scale equals the CPU's), thread 0 forms the scale with Fp8GroupScale, and every thread
// quantizes its elements with Fp8QuantizeDiv (an IEEE division: -prec-div=true).
constexpr int kGroupThreads = 128;

__global__ void QuantFp8GroupKernel(uint8_t* out, float* scales, const void* x, DType xd, int64_t K, int64_t G,
                                    int64_t group_size, float amax_floor, float scale_floor) {
  PdlWait();
  __shared__ float part[kGroupThreads];
  __shared__ float s_sh;
  const int64_t mg = blockIdx.x;
  const int64_t m = mg / G, g = mg - m * G;
  const int64_t k0 = g * group_size;
  const int64_t k1 = k0 + group_size < K ? k0 + group_size : K;
  const int64_t base = m * K;
  float mx = 0.0f;
  for (int64_t k = k0 + threadIdx.x; k < k1; k += kGroupThreads) {
    const float v = fabsf(LoadAny(x, xd, base + k));
    mx = v > mx ? v : mx;  // NaN fails the comparison: left out
  }
  part[threadIdx.x] = mx;
  __syncthreads();
  for (int off = kGroupThreads / 2; off >= 1; off /= 2) {
    if (static_cast<int>(threadIdx.x) < off) {
      const float o = part[threadIdx.x + off];
      part[threadIdx.x] = o > part[threadIdx.x] ? o : part[threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    s_sh = Fp8GroupScale(part[0], amax_floor, scale_floor);
    scales[mg] = s_sh;
  }
  __syncthreads();
  const float s = s_sh;
  for (int64_t k = k0 + threadIdx.x; k < k1; k += kGroupThreads)
    out[base + k] = Fp8QuantizeDiv(LoadAny(x, xd, base + k), s);
}

void QuantFp8PerTokenGroupCuda(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                               int64_t group_size, float amax_floor, float scale_floor) {
  CudaQueue& cq = Cuda(q);
  const int64_t M = x.dim(0), K = x.dim(1), G = scales.dim(1);
  if (M == 0 || K == 0) return;
  VT_CHECK(M * G < (int64_t{1} << 31), "QuantFp8PerTokenGroup: ", M, " rows x ", G,
           " groups exceed the CUDA grid; use a larger group_size");
  DeviceGuard guard(cq.device.index);
  LaunchOverlapped(cq, "QuantFp8GroupKernel", QuantFp8GroupKernel, dim3(static_cast<unsigned>(M * G)),
                   dim3(kGroupThreads), 0, out.data_as<uint8_t>(), scales.data_as<float>(), x.data(), x.dtype(), K, G,
                   group_size, amax_floor, scale_floor);
}

}  // namespace

int64_t QuantFp8VecLaunches() { return g_quant_vec_launches.load(std::memory_order_relaxed); }

void RegisterQuantKernels() {
  Register<OpId::kQuantFp8Static>(DeviceType::kCUDA, &QuantFp8StaticCuda);
  Register<OpId::kQuantFp8PerTokenGroup>(DeviceType::kCUDA, &QuantFp8PerTokenGroupCuda);
}

}  // namespace vt::cuda
