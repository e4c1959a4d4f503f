// CUDA MoeExpertsFp8GroupScaled (vt/ops/moe.h): block-wise and per-channel FP8 experts with
// per-token-group activation scales. It reads the routing on the device only (no host
// synchronisation: a decode step stays capturable in a CUDA graph):
//  - gate/up: a CTA per (token, slot) pair and group of 8 activation indices i, a warp per i:
//    the group-scaled dot products (GroupDot) of the token's x8 row with gate row i and up
//    row I + i of the expert, each group's sums times the token's group scale and the row's
//    own block scale (gate rows read the expert's gate scale rows, up rows its up scale
//    rows); g and u rounded to the activation dtype, SiLU-mul rounded, stored as f32 in a
//    [T * k, I] scratch (the rounded values, exact in f32);
//  - QuantFp8PerTokenGroup of that scratch (G = block_k, the op's floors): the bytes and
//    scales the CPU's quantizer gives for the same values;
//  - down + combine: a CTA per token and group of 8 outputs h, a warp per h: for each slot in
//    order, the group-scaled dot product of the pair's a8 row with down row h of the expert,
//    accumulated as acc + w_j * y_j, rounded to out.
// Weights stream in 16-byte vectors when rows and groups allow it, else a byte per lane;
// each selected expert's rows are read once per (token, slot) pair (no grouped GEMM for
// prefill yet). The f32 sums run in another order than the CPU's; the op table's 2^-5
// share covers that. A bad expert id is recorded as an index error (device_error.h) and its
// slot contributes nothing.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/kernels.h"
#include "vt/ops/moe.h"
#include "vt/ops/quant.h"

namespace vt::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
std::atomic<int64_t> g_launches{0};
std::atomic<int64_t> g_vector_launches{0};

bool VectorsOn() {
  static const bool on = SwitchOn("VT_CUDA_MOE_GROUP_VEC");
  return on;
}

__device__ __forceinline__ float WarpSum(float t) {
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) t = t + __shfl_xor_sync(0xFFFFFFFFu, t, off);
  return t;
}

// The warp's group-scaled dot products of x[0, K) (scales sx per group of block_k columns)
// with w0 (scales s0) and, kTwo, w1 (scales s1), on every lane. kVec (K and block_k
// multiples of 16, 16-byte aligned rows): each lane takes 16-byte vectors, sums a vector's
// 16 products and adds that sum times its group's two scales; else the lanes take single
// columns of a group, the warp sums the group and adds it times the scales, group by group.
template <bool kVec, bool kTwo>
__device__ __forceinline__ void GroupDot(const uint8_t* __restrict__ x, const float* __restrict__ sx,
                                         const uint8_t* __restrict__ w0, const float* __restrict__ s0,
                                         const uint8_t* __restrict__ w1, const float* __restrict__ s1, int64_t K,
                                         int64_t block_k, int lane, float& r0, float& r1) {
  float a0 = 0.0f, a1 = 0.0f;
  if constexpr (kVec) {
#pragma unroll 2
    for (int64_t c = int64_t{lane} * 16; c < K; c += 32 * 16) {
      float xv[16], wv[16];
      Fp8x16ToFloat(__ldg(reinterpret_cast<const uint4*>(x + c)), xv);
      const int64_t grp = c / block_k;
      const float sxg = sx[grp];
      Fp8x16ToFloat(LoadStream16(w0 + c), wv);
      float t0 = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) t0 = __fmaf_rn(xv[i], wv[i], t0);
      a0 = __fmaf_rn(t0, sxg * s0[grp], a0);
      if constexpr (kTwo) {
        Fp8x16ToFloat(LoadStream16(w1 + c), wv);
        float t1 = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) t1 = __fmaf_rn(xv[i], wv[i], t1);
        a1 = __fmaf_rn(t1, sxg * s1[grp], a1);
      }
    }
    r0 = WarpSum(a0);
    if constexpr (kTwo) r1 = WarpSum(a1);
  } else {
    const int64_t G = (K + block_k - 1) / block_k;
    for (int64_t grp = 0; grp < G; ++grp) {
      const int64_t c0 = grp * block_k, c1 = c0 + block_k < K ? c0 + block_k : K;
      float t0 = 0.0f, t1 = 0.0f;
      for (int64_t c = c0 + lane; c < c1; c += 32) {
        const float xv = Fp8E4M3ToFloat(x[c]);
        t0 = __fmaf_rn(xv, Fp8E4M3ToFloat(w0[c]), t0);
        if constexpr (kTwo) t1 = __fmaf_rn(xv, Fp8E4M3ToFloat(w1[c]), t1);
      }
      a0 = a0 + WarpSum(t0) * sx[grp] * s0[grp];
      if constexpr (kTwo) a1 = a1 + WarpSum(t1) * sx[grp] * s1[grp];
    }
    r0 = a0;
    r1 = a1;
  }
}

// a[p, i] = round(Silu(g_i) * u_i) for pair p = blockIdx.x, i = blockIdx.y * kWarps + warp.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    MoeGroupScaledGateUpKernel(float* a, const uint8_t* __restrict__ x8, const float* __restrict__ sx,
                               const int32_t* __restrict__ ids, const uint8_t* __restrict__ w13,
                               const float* __restrict__ s13, DType act, int64_t k, int64_t H, int64_t I, int64_t E,
                               int64_t block_n, int64_t block_k, int64_t nI, int64_t GH, IndexErrorRecord* err) {
  PdlWait();
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t p = blockIdx.x;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kWarps + warp;
  if (i >= I) return;  // uniform across the warp; no block-wide barrier follows
  const int64_t e = ids[p];
  if (e < 0 || e >= E) {
    if (i == 0 && lane == 0) RecordIndexError(err, IndexError::kMoeExpertId, p, e, E);
    return;
  }
  const float* sg = s13 + (e * 2 * nI + i / block_n) * GH;       // the gate rows' own scale rows
  const float* su = s13 + (e * 2 * nI + nI + i / block_n) * GH;  // then the up rows'
  float g = 0.0f, u = 0.0f;
  GroupDot<kVec, true>(x8 + (p / k) * H, sx + (p / k) * GH, w13 + (e * 2 * I + i) * H, sg,
                       w13 + (e * 2 * I + I + i) * H, su, H, block_k, lane, g, u);
  g = RoundAny(act, g);
  u = RoundAny(act, u);
  if (lane == 0) a[p * I + i] = RoundAny(act, numerics::Silu(g) * u);
}

// out[t, h] for t = blockIdx.x, h = blockIdx.y * kWarps + warp: Σ_j weights[t, j] * y_j in
// slot order, y_j the group-scaled product of a8[t * k + j] with down row h of its expert.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    MoeGroupScaledDownKernel(void* out, DType od, const uint8_t* __restrict__ a8, const float* __restrict__ sa,
                             const int32_t* __restrict__ ids, const float* __restrict__ weights,
                             const uint8_t* __restrict__ w2, const float* __restrict__ s2, int64_t k, int64_t H,
                             int64_t I, int64_t E, int64_t block_n, int64_t block_k, int64_t nH, int64_t GI) {
  PdlWait();
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t t = blockIdx.x;
  const int64_t h = static_cast<int64_t>(blockIdx.y) * kWarps + warp;
  if (h >= H) return;  // uniform across the warp
  float acc = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t p = t * k + j;
    const int64_t e = ids[p];
    if (e < 0 || e >= E) continue;  // recorded by the gate/up kernel; uniform across the warp
    float y = 0.0f, unused = 0.0f;
    GroupDot<kVec, false>(a8 + p * I, sa + p * GI, w2 + (e * H + h) * I, s2 + (e * nH + h / block_n) * GI, nullptr,
                          nullptr, I, block_k, lane, y, unused);
    acc = acc + weights[p] * y;
  }
  if (lane == 0) StoreAny(out, od, t * H + h, acc);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void MoeExpertsFp8GroupScaledCuda(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& x_scales,
                                  const Tensor& ids, const Tensor& weights, const Tensor& w_gate_up,
                                  const Tensor& s_gate_up, const Tensor& w_down, const Tensor& s_down,
                                  int64_t block_n, int64_t block_k, float amax_floor, float scale_floor) {
  const int64_t T = x8.dim(0), H = x8.dim(1), k = ids.dim(1), I = w_down.dim(1), E = w_gate_up.dim(0) / (2 * I);
  if (T == 0 || H == 0) return;
  VT_CHECK((I + kWarps - 1) / kWarps <= 65535 && (H + kWarps - 1) / kWarps <= 65535 && T * k <= 0x7FFFFFFF,
           "MoeExpertsFp8GroupScaled on cuda: H=", H, ", I=", I, " or ", T * k,
           " (token, slot) pairs exceed the kernels' grid");
  const int64_t nI = (I + block_n - 1) / block_n, nH = (H + block_n - 1) / block_n;
  const int64_t GH = x_scales.dim(1), GI = s_down.dim(1);
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  const Tensor act = Tensor::Empty({T * k, I}, DType::kF32, out.device());
  // 16-byte vectors when every row and group starts on one (VT_CUDA_MOE_GROUP_VEC=0: never,
  // for A/B runs).
  const bool vec = VectorsOn() && block_k % 16 == 0 && H % 16 == 0 && I % 16 == 0 && Aligned16(x8.data()) &&
                   Aligned16(w_gate_up.data()) && Aligned16(w_down.data());
  const dim3 grid13(static_cast<unsigned>(T * k), static_cast<unsigned>((I + kWarps - 1) / kWarps));
  LaunchOverlapped(cq, "MoeGroupScaledGateUpKernel",
                   vec ? MoeGroupScaledGateUpKernel<true> : MoeGroupScaledGateUpKernel<false>, grid13, dim3(kThreads), 0,
                   act.data_as<float>(), x8.data_as<uint8_t>(), x_scales.data_as<float>(), ids.data_as<int32_t>(),
                   w_gate_up.data_as<uint8_t>(), s_gate_up.data_as<float>(), out.dtype(), k, H, I, E, block_n,
                   block_k, nI, GH, cq.index_errors);
  const Tensor a8 = Tensor::Empty({T * k, I}, DType::kF8E4M3, out.device());
  const Tensor sa = Tensor::Empty({T * k, GI}, DType::kF32, out.device());
  QuantFp8PerTokenGroup(q, a8, sa, act, block_k, amax_floor, scale_floor);
  const dim3 grid2(static_cast<unsigned>(T), static_cast<unsigned>((H + kWarps - 1) / kWarps));
  LaunchOverlapped(cq, "MoeGroupScaledDownKernel",
                   vec ? MoeGroupScaledDownKernel<true> : MoeGroupScaledDownKernel<false>, grid2, dim3(kThreads), 0,
                   out.data(),
                   out.dtype(), a8.data_as<uint8_t>(), sa.data_as<float>(), ids.data_as<int32_t>(),
                   weights.data_as<float>(), w_down.data_as<uint8_t>(), s_down.data_as<float>(), k, H, I, E, block_n,
                   block_k, nH, GI);
  g_launches.fetch_add(1, std::memory_order_relaxed);
  if (vec) g_vector_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

int64_t MoeGroupScaledLaunches() { return g_launches.load(std::memory_order_relaxed); }
int64_t MoeGroupScaledVectorLaunches() { return g_vector_launches.load(std::memory_order_relaxed); }

void RegisterMoeGroupScaledKernels() {
  Register<OpId::kMoeExpertsFp8GroupScaled>(DeviceType::kCUDA, &MoeExpertsFp8GroupScaledCuda);
}

}  // namespace vt::cuda
