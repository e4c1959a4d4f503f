// The FP8 down-projection kernel for few tokens (decode), included by moe.cu: the selected
// experts' rows streamed like one dense weight, the way the dense GEMV (matmul_gemv.cu)
// streams its weight.
//
// For each token the k selected experts' down blocks form one virtual weight of H rows and
// k·I columns: row h is the concatenation, in slot order, of row h of each selected
// expert's down block (I bytes each). CTA (c, t) owns a contiguous share of token t's rows,
// and the grid is about one wave of CTAs over all tokens, so every CTA streams an equal
// share. A thread owns one 16-byte vector of the k·I columns (slot j's vectors belong to
// threads j·I/16 ...), holds its slice of the activation as floats, and loads the weight
// rows of the next group before computing the current one (register double buffering).
// Each warp combines its lanes with xor shuffles and the warp partials are summed in warp
// order: a fixed order, so the bytes do not depend on the launch or on the other tokens.
// Expert ids are read on the device (no host synchronization), so the weight loads cannot
// start before the routing kernel ends.
//
// The kernel folds each slot's scale (routing weight times the expert's alpha, and for
// per-token activations their scale) into the thread's activation slice before the dot
// product, so one sum per row gives Σ_j w_j·y_j. That rounds differently from the per-slot
// kernel in moe.cu; the op table's tolerance for the expert ops (a share of each output's
// magnitude) covers both. The gate/up projection stays on moe.cu's per-pair kernel: a GEMV
// of the same design measured no faster at one token and slower at 16
// (bench/kernel_notes.md).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "vt/cuda/device_util.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/kernels.h"

namespace vt::cuda {

// How the expert kernels scale and round: MoeExperts, MoeExpertsFp8, MoeExpertsFp8PerToken.
enum class Scaling { kNone, kStatic, kPerToken };

namespace moe_gemv {

constexpr int kDownRows = 4;     // output rows per down group
constexpr int kMaxThreads = 1024;

// CTAs per SM the register budget must allow: 1024 threads per SM (64 registers a thread)
// up to 512-thread CTAs, as the dense GEMV's one-vector tunings.
constexpr int MinCtas(int threads) { return threads <= 512 ? 1024 / threads : 1; }

__device__ __forceinline__ float WarpAdd(float s) {
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) s = s + __shfl_xor_sync(0xFFFFFFFFu, s, off);
  return s;
}

// The expert of pair p, or -1 when its id is outside [0, E).
__device__ __forceinline__ int ExpertOf(const int32_t* ids, int64_t p, int E) {
  const int e = __ldg(ids + p);
  return e >= 0 && e < E ? e : -1;
}

// out[t, h] for the rows of CTA (blockIdx.x, t = blockIdx.y): Σ over slots j and i of
// w2[e_j·H + h, i] · a[t·k + j, i] · s_j, s_j = weights[p] · alpha2[e] (kStatic, a f32
// values of e4m3fn codes) or weights[p] · a_scales[p] · alpha2[e] (kPerToken, a8 codes).
template <int kT, typename OTag, Scaling kMode>
__global__ void __launch_bounds__(kT, MinCtas(kT))
    DownKernel(typename OTag::T* __restrict__ out, const float* __restrict__ a, const uint8_t* __restrict__ a8,
               const float* __restrict__ a_scales, const int32_t* __restrict__ ids,
               const float* __restrict__ weights, const uint8_t* __restrict__ w2, const float* __restrict__ alpha2,
               int k, int H, int I, int E) {
  constexpr int kWarps = kT / 32, RB = kDownRows;
  __shared__ float part[2][kWarps][RB];
  PdlWait();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int t = blockIdx.y, kvI = I / 16;
  const int r0 = static_cast<int>(static_cast<int64_t>(H) * blockIdx.x / gridDim.x);
  const int r1 = static_cast<int>(static_cast<int64_t>(H) * (blockIdx.x + 1) / gridDim.x);
  if (r0 >= r1) return;  // uniform across the CTA
  const int j = tid / kvI, vl = tid % kvI;
  const int64_t p = static_cast<int64_t>(t) * k + j;
  const int e = j < k ? ExpertOf(ids, p, E) : -1;  // a bad id is reported by the gate/up kernel
  const uint8_t* wbase = w2 + static_cast<int64_t>(e < 0 ? 0 : e) * H * I + static_cast<int64_t>(vl) * 16;
  auto load = [&](uint4 (&w)[RB], int g) {
#pragma unroll
    for (int r = 0; r < RB; ++r)
      w[r] = (e >= 0 && g + r < r1) ? LoadStream16(wbase + static_cast<int64_t>(g + r) * I) : make_uint4(0, 0, 0, 0);
  };
  uint4 cur[RB], nxt[RB];
  load(cur, r0);
  float af[16];
  if (e >= 0) {
    float s;
    if constexpr (kMode == Scaling::kStatic) {
      const float4* src = reinterpret_cast<const float4*>(a + p * I) + 4 * vl;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float4 f = __ldg(src + c);
        af[4 * c] = f.x;
        af[4 * c + 1] = f.y;
        af[4 * c + 2] = f.z;
        af[4 * c + 3] = f.w;
      }
      s = weights[p] * alpha2[e];
    } else {
      Fp8x16ToFloat(__ldg(reinterpret_cast<const uint4*>(a8 + p * I) + vl), af);
      s = weights[p] * (a_scales[p] * alpha2[e]);
    }
#pragma unroll
    for (int c = 0; c < 16; ++c) af[c] = af[c] * s;
  } else {
#pragma unroll
    for (int c = 0; c < 16; ++c) af[c] = 0.0f;
  }
  int buf = 0;
  for (int g = r0; g < r1; g += RB) {
    if (g + RB < r1) load(nxt, g + RB);
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      float wf[16];
      Fp8x16ToFloat(cur[r], wf);
      float acc = 0.0f;
#pragma unroll
      for (int c = 0; c < 16; ++c) acc = __fmaf_rn(af[c], wf[c], acc);
      acc = WarpAdd(acc);
      if (lane == 0) part[buf][warp][r] = acc;
    }
    __syncthreads();
    if (tid < RB && g + tid < r1) {
      float s = part[buf][0][tid];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) s = s + part[buf][w][tid];
      out[static_cast<int64_t>(t) * H + g + tid] = OTag::Store(s);
    }
    buf ^= 1;
#pragma unroll
    for (int r = 0; r < RB; ++r) cur[r] = nxt[r];
  }
}

// ---- launches --------------------------------------------------------------------------

// The thread counts instantiated: the smallest that gives every vector of a row a thread.
constexpr int kThreadChoices[] = {64, 128, 256, 384, 512, 768, 1024};

inline int ThreadsFor(int64_t vectors) {
  for (int n : kThreadChoices)
    if (vectors <= n) return n;
  return 0;
}

template <typename Kernel>
int ResidentCtas(Kernel kernel, int threads) {
  int blocks = 0;
  VT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0));
  return std::max(blocks, 1);
}

// CTAs per token: about one wave over all tokens, no CTA with fewer rows than a group.
inline unsigned CtasPerToken(int64_t wave, int64_t tokens, int64_t rows, int group) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wave / tokens, rows / group)));
}

template <int kT, typename OTag, Scaling kMode>
void LaunchDown(CudaQueue& cq, typename OTag::T* out, const float* a, const uint8_t* a8, const float* a_scales,
                const int32_t* ids, const float* weights, const uint8_t* w2, const float* alpha2, int64_t T,
                int64_t k, int64_t H, int64_t I, int64_t E) {
  auto* kernel = DownKernel<kT, OTag, kMode>;
  static const int resident = ResidentCtas(kernel, kT);
  const int64_t wave = int64_t{std::max(cq.sm_count, 1)} * resident;
  const dim3 grid(CtasPerToken(wave, T, H, kDownRows), static_cast<unsigned>(T));
  LaunchOverlapped(cq, "MoeGemvDownKernel", kernel, grid, kT, 0, out, a, a8, a_scales, ids, weights, w2, alpha2,
                   static_cast<int>(k), static_cast<int>(H), static_cast<int>(I), static_cast<int>(E));
}

// Calls fn(std::integral_constant<int, n>{}) for the thread count n = ThreadsFor(vectors).
template <typename Fn>
void WithThreads(int64_t vectors, Fn&& fn) {
  switch (ThreadsFor(vectors)) {
    case 64: fn(std::integral_constant<int, 64>{}); return;
    case 128: fn(std::integral_constant<int, 128>{}); return;
    case 256: fn(std::integral_constant<int, 256>{}); return;
    case 384: fn(std::integral_constant<int, 384>{}); return;
    case 512: fn(std::integral_constant<int, 512>{}); return;
    case 768: fn(std::integral_constant<int, 768>{}); return;
    default: fn(std::integral_constant<int, 1024>{}); return;
  }
}

}  // namespace moe_gemv

}  // namespace vt::cuda
