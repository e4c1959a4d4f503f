// CUDA MatmulFp8GroupScaled (vt/ops/matmul.h), picked by shape:
//  - one row of a (decode): the GEMV kernel of matmul_gemv.cu with the group scales
//    (MatmulFp8GroupScaledGemv), which streams the weight like the static path;
//  - more rows: cuBLASLt's scaled FP8 GEMM on sm_90 (MatmulFp8GroupScaledLt in matmul.cpp:
//    128 x 128 weight blocks with 1 x 128 activation groups, or per-channel weights with
//    per-token activations);
//  - otherwise the naive kernel below: one warp per output element; for each group of K
//    the lanes take its elements in strides of 32 (fma in f32), the warp sums them with xor
//    shuffles, and the group's sum, times its two scales, is added to the accumulator in
//    ascending group order.
// Every path is the definition's sums in some f32 order; the tests hold each to the DESIGN
// bound against a float64 reference.
#include <cuda_runtime.h>

#include "vt/cuda/device_util.cuh"
#include "vt/cuda/matmul.h"
#include "vt/ops/matmul.h"

namespace vt::cuda {

namespace {

constexpr int kWarpsPerCta = 8;

__global__ void __launch_bounds__(kWarpsPerCta * 32)
    MatmulFp8GroupScaledKernel(const uint8_t* __restrict__ a, const float* __restrict__ sa,
                               const uint8_t* __restrict__ b, const float* __restrict__ sb, void* out, DType od,
                               const void* bias, DType bd, int64_t M, int64_t N, int64_t K, int64_t G,
                               int64_t block_n, int64_t block_k) {
  PdlWait();
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kWarpsPerCta + (threadIdx.x >> 5);
  if (idx >= M * N) return;  // whole warps leave together
  const int64_t m = idx / N, n = idx - m * N;
  const uint8_t* ar = a + m * K;
  const uint8_t* br = b + n * K;
  const float* sbr = sb + (n / block_n) * G;
  float acc = 0.0f;
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * block_k;
    const int64_t k1 = k0 + block_k < K ? k0 + block_k : K;
    float t = 0.0f;
    for (int64_t k = k0 + lane; k < k1; k += 32) t = __fmaf_rn(Fp8E4M3ToFloat(ar[k]), Fp8E4M3ToFloat(br[k]), t);
#pragma unroll
    for (int off = 16; off >= 1; off /= 2) t = t + __shfl_xor_sync(0xFFFFFFFFu, t, off);
    acc = acc + t * sa[m * G + g] * sbr[g];
  }
  if (lane == 0) {
    if (bias != nullptr) acc = acc + LoadAny(bias, bd, n);
    StoreAny(out, od, idx, acc);
  }
}

__global__ void Copy2dKernel(float* dst, int64_t ds0, int64_t ds1, const float* src, int64_t ss0, int64_t ss1,
                             int64_t rows, int64_t cols) {
  PdlWait();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * cols) return;
  const int64_t i = idx / cols, j = idx - i * cols;
  dst[i * ds0 + j * ds1] = src[i * ss0 + j * ss1];
}

// Rows [m0, m1) of the product: the one-row GEMV for each row where it takes them, else the
// naive kernel.
void ProductRows(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales, const Tensor& b,
                 const Tensor& b_scales, int64_t block_n, int64_t block_k, const Tensor* bias, int64_t m0,
                 int64_t m1) {
  const Tensor row_a = a.Slice(0, m0, m0 + 1);
  if (GroupScaledGemvFits(row_a, b, block_n, block_k)) {
    for (int64_t m = m0; m < m1; ++m)
      MatmulFp8GroupScaledGemv(q, out.Slice(0, m, m + 1), a.Slice(0, m, m + 1), a_scales.Slice(0, m, m + 1), b,
                               b_scales, block_n, block_k, bias);
    return;
  }
  MatmulFp8GroupScaledNaive(q, out.Slice(0, m0, m1), a.Slice(0, m0, m1), a_scales.Slice(0, m0, m1), b, b_scales,
                            block_n, block_k, bias);
}

// One row: the GEMV. More: cuBLASLt's scaled GEMM over the rows up to a multiple of 4 (its
// activation scales need whole 16-byte rows), the 1-3 rows left one GEMV each; 2 or 3 rows,
// or a shape cuBLASLt does not take: the GEMV per row where it fits (up to 3 rows), else the
// naive kernel.
void MatmulFp8GroupScaledCuda(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales,
                              const Tensor& b, const Tensor& b_scales, int64_t block_n, int64_t block_k,
                              const Tensor* bias) {
  const int64_t M = a.dim(0), M4 = M / 4 * 4;
  if (M * b.dim(0) == 0) return;
  if (GroupScaledGemvFits(a, b, block_n, block_k))
    return MatmulFp8GroupScaledGemv(q, out, a, a_scales, b, b_scales, block_n, block_k, bias);
  if (M4 > 0 && MatmulFp8GroupScaledLt(q, out.Slice(0, 0, M4), a.Slice(0, 0, M4), a_scales.Slice(0, 0, M4), b,
                                       b_scales, block_n, block_k, bias)) {
    if (M4 < M) ProductRows(q, out, a, a_scales, b, b_scales, block_n, block_k, bias, M4, M);
    return;
  }
  if (M < 4) return ProductRows(q, out, a, a_scales, b, b_scales, block_n, block_k, bias, 0, M);
  MatmulFp8GroupScaledNaive(q, out, a, a_scales, b, b_scales, block_n, block_k, bias);
}

}  // namespace

void MatmulFp8GroupScaledNaive(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& a_scales,
                               const Tensor& b, const Tensor& b_scales, int64_t block_n, int64_t block_k,
                               const Tensor* bias) {
  CudaQueue& cq = Cuda(q);
  const int64_t M = a.dim(0), N = b.dim(0), K = a.dim(1), G = a_scales.dim(1);
  if (M * N == 0) return;
  const int64_t ctas = (M * N + kWarpsPerCta - 1) / kWarpsPerCta;
  VT_CHECK(ctas < (int64_t{1} << 31), "MatmulFp8GroupScaled: ", M, "x", N, " outputs exceed the CUDA grid");
  DeviceGuard guard(cq.device.index);
  LaunchOverlapped(cq, "MatmulFp8GroupScaledKernel", MatmulFp8GroupScaledKernel, dim3(static_cast<unsigned>(ctas)),
                   dim3(kWarpsPerCta * 32), 0, a.data_as<uint8_t>(), a_scales.data_as<float>(),
                   b.data_as<uint8_t>(), b_scales.data_as<float>(), out.data(), out.dtype(),
                   bias ? bias->data() : nullptr, bias ? bias->dtype() : DType::kF32, M, N, K, G, block_n, block_k);
}

void LaunchCopy2d(const Queue& q, float* dst, int64_t ds0, int64_t ds1, const float* src, int64_t ss0, int64_t ss1,
                  int64_t rows, int64_t cols) {
  if (rows * cols == 0) return;
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  const int64_t blocks = (rows * cols + 255) / 256;
  VT_CHECK(blocks < (int64_t{1} << 31), "internal: Copy2d of ", rows, "x", cols, " exceeds the CUDA grid");
  LaunchOverlapped(cq, "Copy2dKernel", Copy2dKernel, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, dst, ds0,
                   ds1, src, ss0, ss1, rows, cols);
}

void RegisterMatmulFp8GroupScaledKernel() {
  Register<OpId::kMatmulFp8GroupScaled>(DeviceType::kCUDA, &MatmulFp8GroupScaledCuda);
}

}  // namespace vt::cuda
