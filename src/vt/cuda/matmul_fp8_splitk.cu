// CUDA MatmulFp8 for small M, block-split-K variant: a CTA of 256 threads owns RB rows of
// the weight b [N, K] and a tile of up to MT rows of a; its threads split K, thread t
// reading 16-byte vectors t, t+256, ... of each of its rows, kU vectors per row in flight
// before the first use. The row count RB is picked per shape so that the grid fills the
// GPU's resident CTA slots in whole waves (the weight stream then ends evenly on all SMs).
// Products accumulate in f32 with fma; each warp combines its lanes with xor shuffles and
// the CTA sums the 8 warp partials in warp order (deterministic); alpha and bias are
// applied once at the end.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <initializer_list>

#include "vt/cuda/device_util.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/matmul.h"

namespace vt::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerCta = kThreads / 32;
constexpr int kU = 2;  // vectors per row per thread in flight

template <int MT, int RB>
__global__ void __launch_bounds__(kThreads)
    SplitKKernel(const uint8_t* __restrict__ a, const uint8_t* __restrict__ b, void* __restrict__ out, DType od,
                 const void* __restrict__ bias, DType bd, float alpha, int M, int N, int K) {
  __shared__ float part[kWarpsPerCta][MT][RB];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int n0 = blockIdx.x * RB, m0 = blockIdx.y * MT;
  const int kv = K / 16;
  float acc[MT][RB];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < RB; ++r) acc[m][r] = 0.0f;

  for (int v0 = tid; v0 < kv; v0 += kThreads * kU) {
    uint4 w[kU][RB];
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        const int v = v0 + u * kThreads;
        w[u][r] = (v < kv && n0 + r < N) ? LoadStream16(b + static_cast<size_t>(n0 + r) * K + static_cast<size_t>(v) * 16)
                                         : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int v = v0 + u * kThreads;
      if (v >= kv) break;
      if constexpr (MT == 1) {
        // One row of a: convert it once, then each weight vector as it is used.
        if (m0 >= M) break;
        float af[16];
        Fp8x16ToFloat(__ldg(reinterpret_cast<const uint4*>(a + static_cast<size_t>(m0) * K) + v), af);
#pragma unroll
        for (int r = 0; r < RB; ++r) {
          float wf[16];
          Fp8x16ToFloat(w[u][r], wf);
#pragma unroll
          for (int j = 0; j < 16; ++j) acc[0][r] = __fmaf_rn(af[j], wf[j], acc[0][r]);
        }
      } else {
        // Several rows of a: convert the weight vectors once and reuse them for each row.
        float wf[RB][16];
#pragma unroll
        for (int r = 0; r < RB; ++r) Fp8x16ToFloat(w[u][r], wf[r]);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if (m0 + m >= M) break;
          float af[16];
          Fp8x16ToFloat(__ldg(reinterpret_cast<const uint4*>(a + static_cast<size_t>(m0 + m) * K) + v), af);
#pragma unroll
          for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int j = 0; j < 16; ++j) acc[m][r] = __fmaf_rn(af[j], wf[r][j], acc[m][r]);
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      float s = acc[m][r];
#pragma unroll
      for (int off = 16; off >= 1; off /= 2) s = s + __shfl_xor_sync(0xFFFFFFFFu, s, off);
      if (lane == 0) part[warp][m][r] = s;
    }
  __syncthreads();
  if (tid >= MT * RB) return;
  const int m = tid / RB, r = tid % RB;
  if (m0 + m >= M || n0 + r >= N) return;
  float s = part[0][m][r];
#pragma unroll
  for (int w = 1; w < kWarpsPerCta; ++w) s = s + part[w][m][r];
  float v = alpha * s;
  if (bias != nullptr) v = v + LoadAny(bias, bd, n0 + r);
  const int64_t idx = static_cast<int64_t>(m0 + m) * N + n0 + r;
  if (od == DType::kF32)
    static_cast<float*>(out)[idx] = v;
  else
    static_cast<uint16_t*>(out)[idx] = FloatToBf16(v);
}

template <int MT, int RB>
void Launch(CudaQueue& cq, const Tensor& out, const Tensor& a, const Tensor& b, float alpha, const Tensor* bias) {
  const int M = static_cast<int>(a.dim(0)), N = static_cast<int>(b.dim(0)), K = static_cast<int>(b.dim(1));
  const dim3 grid((N + RB - 1) / RB, (M + MT - 1) / MT);
  SplitKKernel<MT, RB><<<grid, kThreads, 0, cq.stream>>>(a.data_as<uint8_t>(), b.data_as<uint8_t>(), out.data(),
                                                          out.dtype(), bias ? bias->data() : nullptr,
                                                          bias ? bias->dtype() : DType::kF32, alpha, M, N, K);
  VT_CUDA_CHECK_LAUNCH("SplitKKernel");
}

// Resident CTAs per SM of one instantiation (its register use decides), measured once.
template <int MT, int RB>
int CtasPerSm() {
  static const int n = [] {
    int blocks = 0;
    VT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, SplitKKernel<MT, RB>, kThreads, 0));
    return std::max(blocks, 1);
  }();
  return n;
}

template <int MT>
int CtasPerSmFor(int rb) {
  switch (rb) {
    case 12: if constexpr (MT == 1) return CtasPerSm<MT, 12>(); [[fallthrough]];
    case 8: if constexpr (MT == 1) return CtasPerSm<MT, 8>(); [[fallthrough]];
    case 4: return CtasPerSm<MT, 4>();
    case 2: return CtasPerSm<MT, 2>();
    default: return CtasPerSm<MT, 1>();
  }
}

// The rows per CTA among `choices` (descending) whose grid best fills whole waves of the
// GPU's resident CTAs; ties go to more rows (more loads in flight per thread).
template <int MT>
int PickRows(int64_t N, int64_t ctas_m, int sm_count, std::initializer_list<int> choices) {
  int best = 1;
  double best_eff = -1.0;
  for (int rb : choices) {
    const int64_t slots = static_cast<int64_t>(sm_count) * CtasPerSmFor<MT>(rb);
    const int64_t ctas = (N + rb - 1) / rb * ctas_m;
    const int64_t waves = (ctas + slots - 1) / slots;
    const double eff = static_cast<double>(ctas) / static_cast<double>(waves * slots);
    if (eff > best_eff + 0.02) {
      best_eff = eff;
      best = rb;
    }
  }
  return best;
}

template <int MT>
void LaunchRows(CudaQueue& cq, int rb, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                const Tensor* bias) {
  switch (rb) {
    case 12: if constexpr (MT == 1) return Launch<MT, 12>(cq, out, a, b, alpha, bias); [[fallthrough]];
    case 8: if constexpr (MT == 1) return Launch<MT, 8>(cq, out, a, b, alpha, bias); [[fallthrough]];
    case 4: return Launch<MT, 4>(cq, out, a, b, alpha, bias);
    case 2: return Launch<MT, 2>(cq, out, a, b, alpha, bias);
    default: return Launch<MT, 1>(cq, out, a, b, alpha, bias);
  }
}

}  // namespace

void MatmulFp8SplitK(const Queue& q, const Tensor& out, const Tensor& a, const Tensor& b, float alpha,
                     const Tensor* bias) {
  const int64_t M = a.dim(0), N = b.dim(0), K = b.dim(1);
  if (M * N == 0) return;
  const bool fits = K % 16 == 0 && K > 0 && reinterpret_cast<uintptr_t>(a.data()) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(b.data()) % 16 == 0 && N < (int64_t{1} << 30) &&
                    M < (int64_t{1} << 30) && K < (int64_t{1} << 30);
  if (!fits) return MatmulFp8Naive(q, out, a, b, alpha, bias);
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  const int sms = std::max(cq.sm_count, 1);
  if (M <= 1) return LaunchRows<1>(cq, PickRows<1>(N, 1, sms, {12, 8, 4, 2, 1}), out, a, b, alpha, bias);
  if (M <= 2) return LaunchRows<2>(cq, PickRows<2>(N, 1, sms, {4, 2, 1}), out, a, b, alpha, bias);
  if (M <= 4) return LaunchRows<4>(cq, PickRows<4>(N, 1, sms, {4, 2, 1}), out, a, b, alpha, bias);
  const int64_t ctas_m = (M + 7) / 8;
  return LaunchRows<8>(cq, PickRows<8>(N, ctas_m, sms, {4, 2, 1}), out, a, b, alpha, bias);
}

}  // namespace vt::cuda
