// CUDA MatmulFp8 for one row of a (decode, M = 1) and long rows (kGemvMinK <= K <=
// kGemvMaxK): a persistent weight-streaming kernel.
//
// The grid is one wave (SMs x resident CTAs per SM); CTA c owns the contiguous rows
// [N·c/G, N·(c+1)/G) of the weight b [N, K], so every CTA streams an equal, contiguous
// share and all finish together. Its 256 threads split K: thread t owns the 16-byte vectors
// t, t+256, ... (U of them) of every row, and converts its slice of a to floats once.
// Rows go in groups of RB; the loads of the next group are issued before the current
// group is computed (register double buffering), so the weight stream never waits on
// arithmetic or on the per-group reduction. Products accumulate in f32 with fma in a fixed
// order; each warp combines its lanes with xor shuffles, and the 8 warp partials are
// summed in warp order (deterministic); alpha and bias are applied once at the end.
#include <cuda_runtime.h>

#include "vt/cuda/device_util.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/matmul.h"

namespace vt::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Rows per group for U vectors per thread and row: about 8 weight vectors in flight per
// thread per group (and as many again for the next group).
template <int U>
constexpr int GroupRows() {
  return U == 1 ? 8 : U == 2 ? 4 : U == 3 ? 3 : 2;
}

template <int U, int RB>
__device__ __forceinline__ void LoadGroup(uint4 (&w)[U][RB], const uint8_t* __restrict__ b, int g, int r1, int tid,
                                          int kv, int K) {
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      const int v = tid + u * kThreads;
      w[u][r] = (g + r < r1 && v < kv) ? LoadStream16(b + static_cast<size_t>(g + r) * K + static_cast<size_t>(v) * 16)
                                       : make_uint4(0, 0, 0, 0);
    }
}

template <int U>
__global__ void __launch_bounds__(kThreads)
    GemvKernel(const uint8_t* __restrict__ a, const uint8_t* __restrict__ b, void* __restrict__ out, DType od,
               const void* __restrict__ bias, DType bd, float alpha, int N, int K) {
  constexpr int RB = GroupRows<U>();
  __shared__ float part[2][kWarps][RB];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int kv = K / 16;
  const int r0 = static_cast<int>(static_cast<int64_t>(N) * blockIdx.x / gridDim.x);
  const int r1 = static_cast<int>(static_cast<int64_t>(N) * (blockIdx.x + 1) / gridDim.x);
  if (r0 >= r1) return;  // uniform across the CTA

  uint4 cur[U][RB], nxt[U][RB];
  LoadGroup<U, RB>(cur, b, r0, r1, tid, kv, K);
  float af[U][16];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int v = tid + u * kThreads;
    if (v < kv) {
      Fp8x16ToFloat(__ldg(reinterpret_cast<const uint4*>(a) + v), af[u]);
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j) af[u][j] = 0.0f;
    }
  }

  int buf = 0;
  for (int g = r0; g < r1; g += RB) {
    if (g + RB < r1) LoadGroup<U, RB>(nxt, b, g + RB, r1, tid, kv, K);
    float acc[RB];
#pragma unroll
    for (int r = 0; r < RB; ++r) acc[r] = 0.0f;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        float wf[16];
        Fp8x16ToFloat(cur[u][r], wf);
#pragma unroll
        for (int j = 0; j < 16; ++j) acc[r] = __fmaf_rn(af[u][j], wf[j], acc[r]);
      }
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      float s = acc[r];
#pragma unroll
      for (int off = 16; off >= 1; off /= 2) s = s + __shfl_xor_sync(0xFFFFFFFFu, s, off);
      if (lane == 0) part[buf][warp][r] = s;
    }
    // One barrier per group: part is double-buffered, so the next group's writes go to the
    // other half while this group's sums are read.
    __syncthreads();
    if (tid < RB && g + tid < r1) {
      float s = part[buf][0][tid];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) s = s + part[buf][w][tid];
      float v = alpha * s;
      if (bias != nullptr) v = v + LoadAny(bias, bd, g + tid);
      if (od == DType::kF32)
        static_cast<float*>(out)[g + tid] = v;
      else
        static_cast<uint16_t*>(out)[g + tid] = FloatToBf16(v);
    }
    buf ^= 1;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < RB; ++r) cur[u][r] = nxt[u][r];
  }
}

template <int U>
int ResidentCtas() {
  static const int n = [] {
    int blocks = 0;
    VT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, GemvKernel<U>, kThreads, 0));
    return std::max(blocks, 1);
  }();
  return n;
}

template <int U>
void Launch(CudaQueue& cq, const Tensor& out, const Tensor& a, const Tensor& b, float alpha, const Tensor* bias) {
  const int N = static_cast<int>(b.dim(0)), K = static_cast<int>(b.dim(1));
  // One wave, but no CTA with fewer rows than a group.
  const int64_t wave = static_cast<int64_t>(std::max(cq.sm_count, 1)) * ResidentCtas<U>();
  const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wave, N / GroupRows<U>())));
  GemvKernel<U><<<grid, kThreads, 0, cq.stream>>>(a.data_as<uint8_t>(), b.data_as<uint8_t>(), out.data(),
                                                  out.dtype(), bias ? bias->data() : nullptr,
                                                  bias ? bias->dtype() : DType::kF32, alpha, N, K);
  VT_CUDA_CHECK_LAUNCH("GemvKernel");
}

}  // namespace

bool GemvFits(const Tensor& a, const Tensor& b) {
  const int64_t M = a.dim(0), N = b.dim(0), K = b.dim(1);
  return M == 1 && K % 16 == 0 && K >= kGemvMinK && K <= kGemvMaxK && N < (int64_t{1} << 30) &&
         reinterpret_cast<uintptr_t>(a.data()) % 16 == 0 && reinterpret_cast<uintptr_t>(b.data()) % 16 == 0;
}

void MatmulFp8Gemv(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                   const Tensor* bias) {
  if (a.dim(0) * b.dim(0) == 0) return;
  if (!GemvFits(a, b)) return MatmulFp8SplitK(q, out, a, b, alpha, bias);
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  const int64_t vectors_per_thread = (b.dim(1) / 16 + kThreads - 1) / kThreads;
  switch (vectors_per_thread) {
    case 1: return Launch<1>(cq, out, a, b, alpha, bias);
    case 2: return Launch<2>(cq, out, a, b, alpha, bias);
    case 3: return Launch<3>(cq, out, a, b, alpha, bias);
    default: return Launch<4>(cq, out, a, b, alpha, bias);
  }
}

}  // namespace vt::cuda
