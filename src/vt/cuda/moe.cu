// CUDA MoE ops: MoeTopKRouting, MoeExperts, MoeExpertsFp8, MoeExpertsFp8PerToken. Nothing
// here reads the device's
// routing on the host, so a decode step stays capturable in a CUDA graph.
//
// MoeTopKRouting: one warp per token. The lanes evaluate numerics::Exp(l_i - m) (the CPU's
// function, IEEE-exact operations only; m is the max, which is the same value in any order),
// lane 0 sums them in index order as the CPU does, the lanes divide, and each of the k
// rounds takes the largest untaken p (equal values: the lower index) by a warp reduction
// under that total order, which is exactly the CPU's sequential scan. So the bytes equal
// the CPU's (the op table demands it), ties and the renormalisation sum included. Up to
// kRegExperts experts and kRegTopK picks (every Qwen MoE router) the row stays in registers
// (lane l holds experts l, l + 32, ...; lane j the j-th pick) and the picks are written
// once, renormalised; larger rows go through shared memory. Same operations, same order.
//
// MoeExperts / MoeExpertsFp8: two kernels, each grid row reading its expert id on the device.
//  - gate/up: a CTA per (token, slot) pair and group of 8 activation indices i, a warp per i:
//    the dot products of x_t with rows i and I + i of the expert's gate/up block (one pass
//    over x), rounded as the definition rounds them, SiLU-mul, rounded (FP8: quantized to
//    e4m3fn with the shared down input scale), stored as f32 in a [T * k, I] scratch.
//  - down + combine: a CTA per token and group of 8 outputs h, a warp per h: for each slot
//    in order the dot product of the pair's activation with row h of the expert's down block,
//    accumulated as acc + w_j * y_j, then rounded to out.
// A decode step therefore reads only the selected experts' rows, each once per (token,
// slot); a token's bytes do not depend on the other tokens of the call. The weights stream
// in 16-byte loads when the rows allow it (K a multiple of the vector, 16-byte aligned
// bases), else in scalar loads. The f32 sums run in another order than the CPU's GEMMs:
// the op table's tolerance for these ops (op_table_moe.cpp) covers that. A bad expert id
// is recorded as an index error (device_error.h) and its slot contributes nothing.
// Prefill reads each expert's rows once per pair too where no tiled kernel applies.
// FP8 calls of up to kGemvMaxTokens tokens (decode) take the down GEMV of moe_gemv.cuh
// instead, which streams the selected experts' down rows as one weight; FP8 and BF16 calls
// beyond it take the tensor-core tiles of moe_tiled.cu where their shapes fit (each
// expert's rows read once per tile of 64 pairs).
// MoeExpertsFp8PerToken runs the same two kernels with the scales of its definition, and
// between them QuantFp8PerTokenGroup over the [T * k, I] activation rows (G = I: a scale
// per (token, slot) pair, the bytes the CPU's quantizer gives); the down kernel then reads
// e4m3fn activations and multiplies each pair's sum by its scale and the expert's.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/kernels.h"
#include "vt/cuda/moe_gemv.cuh"
#include "vt/cuda/moe_tiled.h"
#include "vt/ops/moe.h"
#include "vt/ops/quant.h"

namespace vt::cuda {

namespace {

constexpr int kRouteWarps = 4;     // tokens per routing CTA (when their rows fit in shared memory)
constexpr int kRegExperts = 512;   // the register routing kernel: experts a row, picks a token
constexpr int kRegTopK = 32;

std::atomic<int64_t> g_register_routing{0};
constexpr int kWarps = 8;          // rows per expert CTA, one warp each
constexpr int kThreads = kWarps * 32;
constexpr size_t kSmemLimit = 48 << 10;

// ---- routing ---------------------------------------------------------------------------

// Every lane's (index, value) candidate -> the warp's best, in every lane's bi, bv: the larger
// value; equal (or unordered: a NaN row) the lower index; bi < 0 is no candidate.
__device__ __forceinline__ void WarpBestPick(int& bi, float& bv) {
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) {
    const int oi = __shfl_xor_sync(0xFFFFFFFFu, bi, off);
    const float ov = __shfl_xor_sync(0xFFFFFFFFu, bv, off);
    if (oi >= 0 && (bi < 0 || ov > bv || (!(bv > ov) && oi < bi))) {
      bi = oi;
      bv = ov;
    }
  }
}

// Shared memory: warps * E floats (p), then warps * E bytes (taken).
__global__ void MoeTopKRoutingKernel(int32_t* ids, float* weights, const float* logits, int64_t T, int64_t E,
                                     int64_t k, bool renormalize) {
  PdlWait();
  extern __shared__ float smem[];
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * warps + warp;
  if (t >= T) return;  // uniform across the warp; the kernel has no block-wide barrier
  float* p = smem + static_cast<int64_t>(warp) * E;
  unsigned char* taken = reinterpret_cast<unsigned char*>(smem + static_cast<int64_t>(warps) * E) +
                         static_cast<int64_t>(warp) * E;
  const float* row = logits + t * E;
  // The CPU's max: m = row[0], then m = row[i] > m ? row[i] : m. The same value in any order
  // (a NaN row[0] stays NaN; a NaN elsewhere reaches every p through s either way).
  float m = row[0];
  for (int64_t i = lane; i < E; i += 32) m = row[i] > m ? row[i] : m;
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) {
    const float o = __shfl_xor_sync(0xFFFFFFFFu, m, off);
    m = o > m ? o : m;
  }
  m = __shfl_sync(0xFFFFFFFFu, m, 0);
  for (int64_t i = lane; i < E; i += 32) {
    p[i] = numerics::Exp(row[i] - m);
    taken[i] = 0;
  }
  __syncwarp();
  float s = 0.0f;
  if (lane == 0)
    for (int64_t i = 0; i < E; ++i) s += p[i];  // index order, as the CPU
  s = __shfl_sync(0xFFFFFFFFu, s, 0);
  for (int64_t i = lane; i < E; i += 32) p[i] = p[i] / s;
  __syncwarp();
  float sum = 0.0f;  // lane 0's
  for (int64_t j = 0; j < k; ++j) {
    // The lane's best untaken entry: ascending indices, strictly larger replaces.
    int bi = -1;
    float bv = 0.0f;
    for (int64_t i = lane; i < E; i += 32)
      if (!taken[i] && (bi < 0 || p[i] > bv)) {
        bi = static_cast<int>(i);
        bv = p[i];
      }
    WarpBestPick(bi, bv);
    bi = __shfl_sync(0xFFFFFFFFu, bi, 0);  // j < k <= E: some entry is untaken, bi >= 0
    if (lane == 0) {
      taken[bi] = 1;
      ids[t * k + j] = bi;
      weights[t * k + j] = p[bi];
      sum += p[bi];
    }
    __syncwarp();  // taken[bi] visible to every lane before the next round
  }
  if (renormalize && lane == 0)
    for (int64_t j = 0; j < k; ++j) weights[t * k + j] = weights[t * k + j] / sum;
}

// The same routing with a token's row in registers: kPer = ceil(E / 32) values a lane
// (lane l: experts l + 32u), k <= 32 picks kept by lanes 0..k-1.
template <int kPer>
__global__ void MoeTopKRoutingRegKernel(int32_t* ids, float* weights, const float* logits, int64_t T, int E, int k,
                                        bool renormalize) {
  PdlWait();
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * warps + warp;
  if (t >= T) return;  // uniform across the warp; the kernel has no block-wide barrier
  const float* row = logits + t * E;
  float p[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) p[u] = lane + 32 * u < E ? row[lane + 32 * u] : 0.0f;
  // The CPU's max, as the shared-memory kernel takes it.
  float m = row[0];
#pragma unroll
  for (int u = 0; u < kPer; ++u)
    if (lane + 32 * u < E) m = p[u] > m ? p[u] : m;
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) {
    const float o = __shfl_xor_sync(0xFFFFFFFFu, m, off);
    m = o > m ? o : m;
  }
  m = __shfl_sync(0xFFFFFFFFu, m, 0);
#pragma unroll
  for (int u = 0; u < kPer; ++u) p[u] = numerics::Exp(p[u] - m);
  // Lane 0 sums in index order (every lane runs the shuffles).
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < kPer; ++u)
    for (int l = 0; l < 32 && l + 32 * u < E; ++l) s += __shfl_sync(0xFFFFFFFFu, p[u], l);
  s = __shfl_sync(0xFFFFFFFFu, s, 0);
#pragma unroll
  for (int u = 0; u < kPer; ++u) p[u] = p[u] / s;
  uint32_t taken = 0;  // bit u: expert lane + 32u
  int my_id = 0;       // lane j: the j-th pick
  float my_w = 0.0f, sum = 0.0f;  // sum: lane 0's, in pick order
  for (int j = 0; j < k; ++j) {
    int bi = -1;
    float bv = 0.0f;
#pragma unroll
    for (int u = 0; u < kPer; ++u)
      if (lane + 32 * u < E && !(taken >> u & 1u) && (bi < 0 || p[u] > bv)) {
        bi = lane + 32 * u;
        bv = p[u];
      }
    WarpBestPick(bi, bv);
    bi = __shfl_sync(0xFFFFFFFFu, bi, 0);  // j < k <= E: some entry is untaken, bi >= 0
    bv = __shfl_sync(0xFFFFFFFFu, bv, 0);
    if (lane == bi % 32) taken |= 1u << (bi / 32);
    if (lane == j) {
      my_id = bi;
      my_w = bv;
    }
    sum += bv;
  }
  if (lane < k) {
    ids[t * k + lane] = my_id;
    weights[t * k + lane] = renormalize ? my_w / sum : my_w;  // every lane's sum is lane 0's
  }
}

template <int kPer>
void LaunchRegRouting(CudaQueue& cq, const Tensor& ids, const Tensor& weights, const Tensor& logits, bool renormalize) {
  const int64_t T = logits.dim(0);
  const unsigned blocks = static_cast<unsigned>((T + kRouteWarps - 1) / kRouteWarps);
  LaunchOverlapped(cq, "MoeTopKRoutingRegKernel", MoeTopKRoutingRegKernel<kPer>, blocks, kRouteWarps * 32, 0,
                   ids.data_as<int32_t>(), weights.data_as<float>(), logits.data_as<float>(), T,
                   static_cast<int>(logits.dim(1)), static_cast<int>(ids.dim(1)), renormalize);
}

void MoeTopKRoutingCuda(const Queue& q, const Tensor& ids, const Tensor& weights, const Tensor& logits,
                        bool renormalize) {
  const int64_t T = logits.dim(0), E = logits.dim(1), k = ids.dim(1);
  if (T == 0) return;
  if (E <= kRegExperts && k <= kRegTopK && SwitchOn("VT_CUDA_MOE_REG_ROUTING")) {
    CudaQueue& cq = Cuda(q);
    DeviceGuard guard(cq.device.index);
    g_register_routing.fetch_add(1, std::memory_order_relaxed);
    const int per = static_cast<int>((E + 31) / 32);
    if (per <= 1)
      LaunchRegRouting<1>(cq, ids, weights, logits, renormalize);
    else if (per <= 2)
      LaunchRegRouting<2>(cq, ids, weights, logits, renormalize);
    else if (per <= 4)
      LaunchRegRouting<4>(cq, ids, weights, logits, renormalize);
    else if (per <= 8)
      LaunchRegRouting<8>(cq, ids, weights, logits, renormalize);
    else
      LaunchRegRouting<16>(cq, ids, weights, logits, renormalize);
    return;
  }
  const size_t per_warp = static_cast<size_t>(E) * (sizeof(float) + 1);
  const int warps = per_warp * kRouteWarps <= kSmemLimit ? kRouteWarps : 1;
  VT_CHECK(per_warp <= kSmemLimit, "MoeTopKRouting: logits is ", logits.Describe(), ": the cuda kernel takes up to ",
           kSmemLimit / (sizeof(float) + 1), " experts");
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  const unsigned blocks = static_cast<unsigned>((T + warps - 1) / warps);
  LaunchOverlapped(cq, "MoeTopKRoutingKernel", MoeTopKRoutingKernel, blocks, warps * 32, per_warp * warps,
                   ids.data_as<int32_t>(), weights.data_as<float>(), logits.data_as<float>(), T, E, k, renormalize);
}

// ---- expert dot products ---------------------------------------------------------------

// N consecutive elements at p (N * sizeof(T) bytes, 16-byte aligned when that is >= 16,
// else 8-byte aligned) widened to f32; kStream: read once, past L1 (the weights).
template <typename Tag, int N, bool kStream>
__device__ __forceinline__ void LoadN(const typename Tag::T* p, float (&f)[N]) {
  using T = typename Tag::T;
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int c = 0; c < kBytes / 16; ++c) {
      const uint4 v = kStream ? LoadStream16(b + 16 * c) : *reinterpret_cast<const uint4*>(b + 16 * c);
      if constexpr (std::is_same_v<Tag, Fp8>) {
        float g[16];
        Fp8x16ToFloat(v, g);
#pragma unroll
        for (int i = 0; i < 16; ++i) f[16 * c + i] = g[i];
      } else {
        constexpr int kPer = 16 / static_cast<int>(sizeof(T));
        T e[kPer];
        memcpy(e, &v, 16);
#pragma unroll
        for (int i = 0; i < kPer; ++i) f[kPer * c + i] = Tag::Load(e[i]);
      }
    }
  } else {
    static_assert(kBytes == 8, "LoadN loads 8 bytes or a multiple of 16");
    const uint2 v = *reinterpret_cast<const uint2*>(b);
    constexpr int kPer = 8 / static_cast<int>(sizeof(T));
    T e[kPer];
    memcpy(e, &v, 8);
#pragma unroll
    for (int i = 0; i < kPer; ++i) f[i] = Tag::Load(e[i]);
  }
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

// The full warp's dot products of x[0, K) with w0 and (kTwo) w1, on every lane. kVec: in
// vectors of 16 bytes of weights (K a multiple of their elements, every base aligned).
template <typename XTag, typename WTag, bool kVec, bool kTwo>
__device__ __forceinline__ void WarpDot(const typename XTag::T* x, const typename WTag::T* w0,
                                        const typename WTag::T* w1, int64_t K, int lane, float& s0, float& s1) {
  float a0 = 0.0f, a1 = 0.0f;
  if constexpr (kVec) {
    constexpr int N = 16 / static_cast<int>(sizeof(typename WTag::T));
#pragma unroll 2
    for (int64_t c = static_cast<int64_t>(lane) * N; c < K; c += 32 * N) {
      float xv[N], wv0[N], wv1[N];
      LoadN<WTag, N, true>(w0 + c, wv0);
      if constexpr (kTwo) LoadN<WTag, N, true>(w1 + c, wv1);
      LoadN<XTag, N, false>(x + c, xv);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        a0 = numerics::Fma(xv[i], wv0[i], a0);
        if constexpr (kTwo) a1 = numerics::Fma(xv[i], wv1[i], a1);
      }
    }
  } else {
    for (int64_t c = lane; c < K; c += 32) {
      const float xv = XTag::Load(x[c]);
      a0 = numerics::Fma(xv, WTag::Load(w0[c]), a0);
      if constexpr (kTwo) a1 = numerics::Fma(xv, WTag::Load(w1[c]), a1);
    }
  }
  s0 = WarpSum(a0);
  if constexpr (kTwo) s1 = WarpSum(a1);
}

// ---- the two expert kernels ------------------------------------------------------------

// a[p, i] for pair p = blockIdx.x, i = blockIdx.y * kWarps + warp. kNone: RTag is x's dtype;
// else x8 and the weights are e4m3fn and RTag is the output dtype (gate/up rounded to it
// after their scales). kStatic: a is the e4m3fn value of round(Silu(g) * u) * inv (alpha13:
// input_scale * weight_scale per expert); kPerToken: a is round(Silu(g) * u), quantized per
// pair afterwards (x_scales: per token, alpha13: the weight scale per expert).
template <typename XTag, typename WTag, typename RTag, bool kVec, Scaling kMode>
__global__ void __launch_bounds__(kThreads)
    MoeGateUpKernel(float* a, const typename XTag::T* x, const float* x_scales, const int32_t* ids,
                    const typename WTag::T* w13, const float* alpha13, float inv_down, int64_t k, int64_t H,
                    int64_t I, int64_t E, IndexErrorRecord* err) {
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
  const typename WTag::T* rows = w13 + e * 2 * I * H;
  float g = 0.0f, u = 0.0f;
  WarpDot<XTag, WTag, kVec, true>(x + (p / k) * H, rows + i * H, rows + (I + i) * H, H, lane, g, u);
  float v;
  if constexpr (kMode == Scaling::kStatic) {
    const float al = alpha13[e];
    g = RoundTo<RTag>(al * g);
    u = RoundTo<RTag>(al * u);
    v = Fp8E4M3ToFloat(QuantizeFp8KeepNan(RoundTo<RTag>(numerics::Silu(g) * u), inv_down));
  } else if constexpr (kMode == Scaling::kPerToken) {
    const float sx = x_scales[p / k], ws = alpha13[e];
    g = RoundTo<RTag>(g * sx * ws);
    u = RoundTo<RTag>(u * sx * ws);
    v = RoundTo<RTag>(numerics::Silu(g) * u);
  } else {
    g = RoundTo<RTag>(g);
    u = RoundTo<RTag>(u);
    v = RoundTo<RTag>(numerics::Silu(g) * u);
  }
  if (lane == 0) a[p * I + i] = v;
}

// out[t, h] for t = blockIdx.x, h = blockIdx.y * kWarps + warp: Σ_j weights[t, j] * y_j in
// slot order, y_j = a[t * k + j] · w_down[e * H + h], times alpha_down[e] (kStatic) or
// a_scales[t * k + j] * w_scale_down[e] (kPerToken, alpha2 holding the weight scales).
template <typename OTag, typename ATag, typename WTag, bool kVec, Scaling kMode>
__global__ void __launch_bounds__(kThreads)
    MoeDownKernel(typename OTag::T* out, const typename ATag::T* a, const float* a_scales, const int32_t* ids,
                  const float* weights, const typename WTag::T* w2, const float* alpha2, int64_t k, int64_t H,
                  int64_t I, int64_t E) {
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
    WarpDot<ATag, WTag, kVec, false>(a + p * I, w2 + (e * H + h) * I, nullptr, I, lane, y, unused);
    if constexpr (kMode == Scaling::kStatic) y = alpha2[e] * y;
    if constexpr (kMode == Scaling::kPerToken) y = y * a_scales[p] * alpha2[e];
    const float wy = weights[p] * y;
    acc = acc + wy;
  }
  if (lane == 0) out[t * H + h] = OTag::Store(acc);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ---- launches -----------------------------------------------------------------------------

// The decode-sized FP8 calls, up to kGemvMaxTokens tokens with down rows of whole 16-byte
// vectors that each get a thread, take the down GEMV (VT_CUDA_MOE_GEMV=0: never; read
// once, for A/B runs).
constexpr int64_t kGemvMaxTokens = 16;
std::atomic<int64_t> g_gemv_launches{0};

bool MoeGemvOn() {
  static const bool on = SwitchOn("VT_CUDA_MOE_GEMV");
  return on;
}

bool MoeGemvFits(int64_t T, int64_t k, int64_t I, const Tensor& w2) {
  return MoeGemvOn() && T <= kGemvMaxTokens && I % 16 == 0 && k * I / 16 <= moe_gemv::kMaxThreads &&
         Aligned16(w2.data());
}

// Runs both kernels (and, kPerToken, the activations' quantization between them). XTag:
// x's storage; WTag: the weights'; RTag: the dtype the gate/up outputs and the activation
// round to; OTag: out's. alpha13 / alpha2 and x_scales as the kernels take them.
template <typename XTag, typename WTag, typename RTag, typename OTag, Scaling kMode>
void LaunchExperts(const Queue& q, const Tensor& out, const Tensor& x, const float* x_scales, const Tensor& ids,
                   const Tensor& weights, const Tensor& w13, const float* alpha13, const Tensor& w2, float inv_down,
                   const float* alpha2) {
  const int64_t T = x.dim(0), H = x.dim(1), k = ids.dim(1), I = w2.dim(1), E = w13.dim(0) / (2 * I);
  if (T == 0 || H == 0) return;
  VT_CHECK((I + kWarps - 1) / kWarps <= 65535 && (H + kWarps - 1) / kWarps <= 65535 && T * k <= 0x7FFFFFFF,
           "MoeExperts on cuda: H=", H, ", I=", I, " or ", T * k, " (token, slot) pairs exceed the kernels' grid");
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  constexpr int64_t N = 16 / static_cast<int64_t>(sizeof(typename WTag::T));
  using XT = typename XTag::T;
  using WT = typename WTag::T;
  using OT = typename OTag::T;
  constexpr bool kFp8 = std::is_same_v<XTag, Fp8> && std::is_same_v<WTag, Fp8> && kMode != Scaling::kNone;
  const bool gemv = kFp8 && MoeGemvFits(T, k, I, w2);
  constexpr bool kTileable =
      kFp8 || (kMode == Scaling::kNone && std::is_same_v<XTag, Bf16> && std::is_same_v<WTag, Bf16>);
  if constexpr (kTileable) {
    if (T > kGemvMaxTokens && MoeTiledFits(cq, out, x, w13, w2)) {
      LaunchMoeTiled(q, out, x, x_scales, ids, weights, w13, alpha13, w2, inv_down, alpha2);
      return;
    }
  }
  const Tensor act = Tensor::Empty({T * k, I}, DType::kF32, out.device());
  const bool vec13 = H % N == 0 && Aligned16(x.data()) && Aligned16(w13.data());
  const dim3 grid13(static_cast<unsigned>(T * k), static_cast<unsigned>((I + kWarps - 1) / kWarps));
  auto* gate_up =
      vec13 ? MoeGateUpKernel<XTag, WTag, RTag, true, kMode> : MoeGateUpKernel<XTag, WTag, RTag, false, kMode>;
  LaunchOverlapped(cq, "MoeGateUpKernel", gate_up, grid13, kThreads, 0, act.data_as<float>(), x.data_as<XT>(),
                   x_scales, ids.data_as<int32_t>(), w13.data_as<WT>(), alpha13, inv_down, k, H, I, E,
                   cq.index_errors);
  // The down kernels' input: act (f32), or its e4m3fn codes with a scale per pair.
  Tensor a8, a_scales;
  if constexpr (kMode == Scaling::kPerToken) {
    a8 = Tensor::Empty({T * k, I}, DType::kF8E4M3, out.device());
    a_scales = Tensor::Empty({T * k, 1}, DType::kF32, out.device());
    QuantFp8PerTokenGroup(q, a8, a_scales, act, I, 0.0f, kFp8PerTokenScaleFloor);
  }
  const uint8_t* a8p = kMode == Scaling::kPerToken ? a8.data_as<uint8_t>() : nullptr;
  const float* scales = kMode == Scaling::kPerToken ? a_scales.data_as<float>() : nullptr;
  if constexpr (kFp8) {
    if (gemv) {
      moe_gemv::WithThreads(k * I / 16, [&](auto threads) {
        moe_gemv::LaunchDown<decltype(threads)::value, OTag, kMode>(
            cq, out.data_as<OT>(), act.data_as<float>(), a8p, scales, ids.data_as<int32_t>(),
            weights.data_as<float>(), w2.data_as<uint8_t>(), alpha2, T, k, H, I, E);
      });
      g_gemv_launches.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  const dim3 grid2(static_cast<unsigned>(T), static_cast<unsigned>((H + kWarps - 1) / kWarps));
  if constexpr (kMode == Scaling::kPerToken) {
    const bool vec2 = I % N == 0 && Aligned16(a8p) && Aligned16(w2.data());
    auto* down = vec2 ? MoeDownKernel<OTag, Fp8, WTag, true, kMode> : MoeDownKernel<OTag, Fp8, WTag, false, kMode>;
    LaunchOverlapped(cq, "MoeDownKernel", down, grid2, kThreads, 0, out.data_as<OT>(), a8p, scales,
                     ids.data_as<int32_t>(), weights.data_as<float>(), w2.data_as<WT>(), alpha2, k, H, I, E);
  } else {
    const bool vec2 = I % N == 0 && Aligned16(act.data()) && Aligned16(w2.data());
    auto* down = vec2 ? MoeDownKernel<OTag, F32, WTag, true, kMode> : MoeDownKernel<OTag, F32, WTag, false, kMode>;
    LaunchOverlapped(cq, "MoeDownKernel", down, grid2, kThreads, 0, out.data_as<OT>(), act.data_as<float>(),
                     static_cast<const float*>(nullptr), ids.data_as<int32_t>(), weights.data_as<float>(),
                     w2.data_as<WT>(), alpha2, k, H, I, E);
  }
}

// Calls fn(Tag{}) for the activation dtypes of the expert ops (F32, BF16).
template <typename Fn>
void DispatchAct(DType d, const char* op, Fn&& fn) {
  switch (d) {
    case DType::kF32: fn(F32{}); return;
    case DType::kBF16: fn(Bf16{}); return;
    default: throw Error(StrCat("internal: ", op, " on cuda got dtype ", DTypeName(d)));
  }
}

void MoeExpertsCuda(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                    const Tensor& w_gate_up, const Tensor& w_down) {
  DispatchAct(x.dtype(), "MoeExperts", [&](auto xt) {
    DispatchAct(w_gate_up.dtype(), "MoeExperts", [&](auto wt) {
      using X = decltype(xt);
      using W = decltype(wt);
      LaunchExperts<X, W, X, X, Scaling::kNone>(q, out, x, nullptr, ids, weights, w_gate_up, nullptr, w_down, 0.0f,
                                                nullptr);
    });
  });
}

#ifdef VT_CUDA_FP8
void MoeExpertsFp8Cuda(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& ids, const Tensor& weights,
                       const Tensor& w_gate_up, const Tensor& alpha_gate_up, const Tensor& w_down,
                       float down_input_scale, const Tensor& alpha_down) {
  const float inv = 1.0f / down_input_scale;  // once, in f32, as QuantFp8Static
  DispatchAct(out.dtype(), "MoeExpertsFp8", [&](auto ot) {
    using O = decltype(ot);
    LaunchExperts<Fp8, Fp8, O, O, Scaling::kStatic>(q, out, x8, nullptr, ids, weights, w_gate_up,
                                                    alpha_gate_up.data_as<float>(), w_down, inv,
                                                    alpha_down.data_as<float>());
  });
}

void MoeExpertsFp8PerTokenCuda(const Queue& q, const Tensor& out, const Tensor& x8, const Tensor& x_scales,
                               const Tensor& ids, const Tensor& weights, const Tensor& w_gate_up,
                               const Tensor& w_scale_gate_up, const Tensor& w_down, const Tensor& w_scale_down) {
  DispatchAct(out.dtype(), "MoeExpertsFp8PerToken", [&](auto ot) {
    using O = decltype(ot);
    LaunchExperts<Fp8, Fp8, O, O, Scaling::kPerToken>(q, out, x8, x_scales.data_as<float>(), ids, weights, w_gate_up,
                                                      w_scale_gate_up.data_as<float>(), w_down, 0.0f,
                                                      w_scale_down.data_as<float>());
  });
}
#endif

}  // namespace

int64_t MoeGemvLaunches() { return g_gemv_launches.load(std::memory_order_relaxed); }

int64_t MoeRoutingRegisterLaunches() { return g_register_routing.load(std::memory_order_relaxed); }

void RegisterMoeKernels() {
  Register<OpId::kMoeTopKRouting>(DeviceType::kCUDA, &MoeTopKRoutingCuda);
  Register<OpId::kMoeExperts>(DeviceType::kCUDA, &MoeExpertsCuda);
#ifdef VT_CUDA_FP8
  Register<OpId::kMoeExpertsFp8>(DeviceType::kCUDA, &MoeExpertsFp8Cuda);
  Register<OpId::kMoeExpertsFp8PerToken>(DeviceType::kCUDA, &MoeExpertsFp8PerTokenCuda);
#endif
}

}  // namespace vt::cuda
