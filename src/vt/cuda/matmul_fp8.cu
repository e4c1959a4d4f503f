// CUDA MatmulFp8 for small M (decode): a weight-streaming kernel, plus the naive baseline
// and the epilogue/fallback kernels the cuBLASLt paths use.
//
// Small-M kernel: each warp owns R rows of b (the weight, [N, K], K contiguous) and a tile
// of up to MT rows of a. Lane l reads 16-byte vectors l, l+32, ... of its rows with
// non-allocating loads, U vectors per row in flight before the first use (R = 1, U = 8 for
// a single row of a, where the conversion of a is cheap; R = 2, U = 4 otherwise); fp8 bytes
// become f32 exactly through the hardware e4m3x2 -> f16x2 conversion; products are
// accumulated in f32 with fma; the 32 lanes' partial sums are combined with xor shuffles
// in a fixed order (deterministic), and alpha (and bias) are applied once at the end.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "vt/cuda/device_util.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/matmul.h"

namespace vt::cuda {

namespace {

constexpr int kGemvWarps = 8;  // warps per block
template <int MT>
constexpr int RowsPerWarp() { return MT == 1 ? 1 : 2; }
template <int MT>
constexpr int InFlight() { return MT == 1 ? 8 : 4; }  // 16-byte vectors per row per lane before use

__device__ __forceinline__ void StoreOut(void* out, DType od, int64_t idx, float v) {
  if (od == DType::kF32)
    static_cast<float*>(out)[idx] = v;
  else
    static_cast<uint16_t*>(out)[idx] = FloatToBf16(v);
}

template <int MT>
__global__ void __launch_bounds__(kGemvWarps * 32)
    SmallMKernel(const uint8_t* __restrict__ a, const uint8_t* __restrict__ b, void* __restrict__ out, DType od,
                 const void* __restrict__ bias, DType bd, float alpha, int M, int N, int K) {
  constexpr int R = RowsPerWarp<MT>(), U = InFlight<MT>();
  const int lane = threadIdx.x % 32;
  const int n0 = (blockIdx.x * kGemvWarps + threadIdx.x / 32) * R;
  const int m0 = blockIdx.y * MT;
  if (n0 >= N) return;  // uniform across the warp
  const int kv = K / 16;
  float acc[MT][R];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;

  for (int v0 = lane; v0 < kv; v0 += 32 * U) {
    uint4 w[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int v = v0 + u * 32;
        w[u][r] = (v < kv && n0 + r < N) ? LoadStream16(b + static_cast<size_t>(n0 + r) * K + static_cast<size_t>(v) * 16)
                                         : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int v = v0 + u * 32;
      if (v >= kv) break;
      float wf[R][16];
#pragma unroll
      for (int r = 0; r < R; ++r) Fp8x16ToFloat(w[u][r], wf[r]);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m0 + m >= M) break;
        const uint4 av = __ldg(reinterpret_cast<const uint4*>(a + static_cast<size_t>(m0 + m) * K) + v);
        float af[16];
        Fp8x16ToFloat(av, af);
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int j = 0; j < 16; ++j) acc[m][r] = __fmaf_rn(af[j], wf[r][j], acc[m][r]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int off = 16; off >= 1; off /= 2) acc[m][r] = acc[m][r] + __shfl_xor_sync(0xFFFFFFFFu, acc[m][r], off);
  if (lane != 0) return;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (m0 + m >= M) break;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (n0 + r >= N) break;
      float v = alpha * acc[m][r];
      if (bias != nullptr) v = v + LoadAny(bias, bd, n0 + r);
      StoreOut(out, od, static_cast<int64_t>(m0 + m) * N + n0 + r, v);
    }
  }
}

__global__ void MatmulFp8NaiveKernel(const uint8_t* a, const uint8_t* b, void* out, DType od, const void* bias,
                                     DType bd, float alpha, int64_t M, int64_t N, int64_t K) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= M * N) return;
  const int64_t m = idx / N, n = idx - m * N;
  float acc = 0.0f;
  for (int64_t k = 0; k < K; ++k)
    acc = __fmaf_rn(Fp8E4M3ToFloat(a[m * K + k]), Fp8E4M3ToFloat(b[n * K + k]), acc);
  float v = alpha * acc;
  if (bias != nullptr) v = v + LoadAny(bias, bd, n);
  StoreOut(out, od, idx, v);
}

__global__ void MatmulNaiveKernel(void* out, DType od, const void* a, DType ad, const void* b, DType bd,
                                  const void* bias, DType biasd, int64_t M, int64_t N, int64_t K) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= M * N) return;
  const int64_t m = idx / N, n = idx - m * N;
  float acc = 0.0f;
  for (int64_t k = 0; k < K; ++k) acc = __fmaf_rn(LoadAny(a, ad, m * K + k), LoadAny(b, bd, n * K + k), acc);
  if (bias != nullptr) acc = acc + LoadAny(bias, biasd, n);
  StoreAny(out, od, idx, acc);
}

__global__ void BiasEpilogueKernel(void* out, DType od, const float* tmp, const void* bias, DType bd, int64_t M,
                                   int64_t N) {
  const int64_t n_all = M * N;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_all; i += stride) {
    float v = tmp[i];
    if (bias != nullptr) v = v + LoadAny(bias, bd, i % N);
    StoreAny(out, od, i, v);
  }
}

template <int MT>
void LaunchSmallM(CudaQueue& cq, const Tensor& out, const Tensor& a, const Tensor& b, float alpha, const Tensor* bias) {
  const int M = static_cast<int>(a.dim(0)), N = static_cast<int>(b.dim(0)), K = static_cast<int>(b.dim(1));
  const int rows_per_block = kGemvWarps * RowsPerWarp<MT>();
  const dim3 grid((N + rows_per_block - 1) / rows_per_block, (M + MT - 1) / MT);
  SmallMKernel<MT><<<grid, kGemvWarps * 32, 0, cq.stream>>>(
      a.data_as<uint8_t>(), b.data_as<uint8_t>(), out.data(), out.dtype(), bias ? bias->data() : nullptr,
      bias ? bias->dtype() : DType::kF32, alpha, M, N, K);
  VT_CUDA_CHECK_LAUNCH("SmallMKernel");
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void MatmulFp8Naive(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                    const Tensor* bias) {
  CudaQueue& cq = Cuda(q);
  const int64_t M = a.dim(0), N = b.dim(0), K = b.dim(1);
  if (M * N == 0) return;
  DeviceGuard guard(cq.device.index);
  const int64_t blocks = (M * N + 255) / 256;
  MatmulFp8NaiveKernel<<<static_cast<unsigned>(blocks), 256, 0, cq.stream>>>(
      a.data_as<uint8_t>(), b.data_as<uint8_t>(), out.data(), out.dtype(), bias ? bias->data() : nullptr,
      bias ? bias->dtype() : DType::kF32, alpha, M, N, K);
  VT_CUDA_CHECK_LAUNCH("MatmulFp8NaiveKernel");
}

void MatmulFp8Small(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                    const Tensor* bias) {
  const int64_t M = a.dim(0), N = b.dim(0), K = b.dim(1);
  if (M * N == 0) return;
  const bool fits = K % 16 == 0 && K > 0 && Aligned16(a.data()) && Aligned16(b.data()) && N < (int64_t{1} << 30) &&
                    M < (int64_t{1} << 30) && K < (int64_t{1} << 30);
  if (!fits) return MatmulFp8Naive(q, out, a, b, alpha, bias);
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  if (M <= 1)
    LaunchSmallM<1>(cq, out, a, b, alpha, bias);
  else if (M <= 2)
    LaunchSmallM<2>(cq, out, a, b, alpha, bias);
  else if (M <= 4)
    LaunchSmallM<4>(cq, out, a, b, alpha, bias);
  else
    LaunchSmallM<8>(cq, out, a, b, alpha, bias);
}

void LaunchBiasEpilogue(const Queue& q, void* out, DType od, const float* tmp, const void* bias, DType bd, int64_t M,
                        int64_t N) {
  CudaQueue& cq = Cuda(q);
  if (M * N == 0) return;
  DeviceGuard guard(cq.device.index);
  BiasEpilogueKernel<<<GridFor(M * N, 256, cq), 256, 0, cq.stream>>>(out, od, tmp, bias, bd, M, N);
  VT_CUDA_CHECK_LAUNCH("BiasEpilogueKernel");
}

namespace {

// 16 e4m3 codes -> 16 BF16 values (exact) per thread and step, grid-stride; n % 16 == 0.
__global__ void Fp8ToBf16Kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, int64_t vectors) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float f[16];
    Fp8x16ToFloat(src[i], f);
    uint32_t w[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      w[j] = static_cast<uint32_t>(FloatToBf16(f[2 * j])) | (static_cast<uint32_t>(FloatToBf16(f[2 * j + 1])) << 16);
    dst[2 * i] = make_uint4(w[0], w[1], w[2], w[3]);
    dst[2 * i + 1] = make_uint4(w[4], w[5], w[6], w[7]);
  }
}

}  // namespace

void LaunchFp8ToBf16(const Queue& q, void* dst, const void* src, int64_t n) {
  CudaQueue& cq = Cuda(q);
  if (n == 0) return;
  DeviceGuard guard(cq.device.index);
  Fp8ToBf16Kernel<<<GridFor(n / 16, 256, cq), 256, 0, cq.stream>>>(static_cast<uint4*>(dst),
                                                                    static_cast<const uint4*>(src), n / 16);
  VT_CUDA_CHECK_LAUNCH("Fp8ToBf16Kernel");
}

void LaunchMatmulNaive(const Queue& q, void* out, DType od, const void* a, DType ad, const void* b, DType bd,
                       const void* bias, DType biasd, int64_t M, int64_t N, int64_t K) {
  CudaQueue& cq = Cuda(q);
  if (M * N == 0) return;
  DeviceGuard guard(cq.device.index);
  MatmulNaiveKernel<<<static_cast<unsigned>((M * N + 255) / 256), 256, 0, cq.stream>>>(out, od, a, ad, b, bd, bias,
                                                                                      biasd, M, N, K);
  VT_CUDA_CHECK_LAUNCH("MatmulNaiveKernel");
}

}  // namespace vt::cuda
