// CUDA PagedAttention for decode steps (one query row per sequence): the PagedAttention
// contract of vt/ops/attention.h, over the grid (sequence, KV head, split).
//
// A CTA of kDecWarps warps serves one (sequence, KV head) and all kG >= group query heads
// that read it (GQA heads share every K and V load). Warp w takes tiles w, w + kDecWarps,
// ... of 32 cached tokens. For scores, lane j owns token j of a tile: its K row comes
// straight from global memory in 16-byte loads, converted to f32 (an F8E4M3 byte widened
// exactly by the hardware pair conversion, its k_scale folded into the query), and dotted
// with every head's pre-scaled query staged in shared memory; an FP8 cache's v_scale
// multiplies the result. Each head keeps its running max and sum (online softmax, f32) per
// warp. For the weighted sum, lane j owns dims [j*D/32, (j+1)*D/32) of every head's
// accumulator, and the tile's V rows are read one row per step across the warp (coalesced). At the end the
// warps' (max, sum, accumulator) triples are merged through shared memory, and the result
// is rounded once to the output dtype, or left as a split's partial when the context is
// split across CTAs (flash-decoding), combined by the last CTA of the sequence and KV head
// (attention_split.cuh) or by AttnCombineKernel (attention.cu).
// A sequence with n != 1 rows (possible only if another one has none, as T == S) is served
// row by row, each row seeing tokens 0..its position. Metadata is checked on the device as
// by the general kernel (attention_seq.cuh).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "vt/cuda/attention.h"
#include "vt/cuda/attention_seq.cuh"
#include "vt/cuda/attention_split.cuh"
#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/kernels.h"
#include "vt/ops/attention.h"

namespace vt::cuda {

namespace {

constexpr int kDecWarps = 4;
constexpr int kDecTile = 32;  // tokens per warp step (one per lane)
constexpr int64_t kDecSpan = kDecWarps * kDecTile;  // a split: a whole tile for every warp
constexpr int kVRows = 8;     // V rows whose loads are in flight together

std::atomic<int64_t> g_decode_launches{0};

// 16 bytes of cache elements -> floats (kVec of them). FP8 bytes are widened exactly and
// not scaled: k_scale is folded into the staged queries and v_scale into the output.
template <typename Cache>
__device__ __forceinline__ void CacheVec16(const uint4 raw, float (&f)[16 / sizeof(typename Cache::T)]) {
  if constexpr (std::is_same_v<Cache, Fp8>) {
    Fp8x16ToFloat(raw, f);
  } else {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = Cache::Load(static_cast<uint16_t>(w[i] & 0xFFFFu));
      f[2 * i + 1] = Cache::Load(static_cast<uint16_t>(w[i] >> 16));
    }
  }
}

// A lane's kDims consecutive cache elements of one V row, as raw bits (2, 4 or 8 bytes).
template <int kBytes>
struct LaneBits;
template <>
struct LaneBits<8> {
  using T = uint2;
};
template <>
struct LaneBits<4> {
  using T = uint32_t;
};
template <>
struct LaneBits<2> {
  using T = uint16_t;
};

template <typename Cache, int kDims>
using LaneRaw = typename LaneBits<kDims * static_cast<int>(sizeof(typename Cache::T))>::T;

template <typename Cache, int kDims>
__device__ __forceinline__ LaneRaw<Cache, kDims> LoadLane(const typename Cache::T* p) {
  return __ldg(reinterpret_cast<const LaneRaw<Cache, kDims>*>(p));
}

// The raw bits -> floats, FP8 unscaled.
template <typename Cache, int kDims>
__device__ __forceinline__ void WidenLane(const LaneRaw<Cache, kDims> raw, float (&f)[kDims]) {
  using C = typename Cache::T;
  C e[kDims];
  std::memcpy(e, &raw, sizeof(raw));
  if constexpr (std::is_same_v<Cache, Fp8>) {
    static_assert(kDims % 2 == 0, "FP8 lanes hold pairs");
#pragma unroll
    for (int k = 0; k < kDims; k += 2) {
      const float2 f2 = Fp8x2ToFloat2(uint32_t{e[k]} | (uint32_t{e[k + 1]} << 8));
      f[k] = f2.x;
      f[k + 1] = f2.y;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kDims; ++k) f[k] = Cache::Load(e[k]);
  }
}

// The kernel's work before its splits are combined; every return is uniform across the CTA.
template <typename Tag, typename Cache, int D, int kG>
__device__ __forceinline__ void PagedDecodeRows(const AttnArgs& a) {
  using T = typename Tag::T;
  using C = typename Cache::T;
  constexpr int kVec = 16 / static_cast<int>(sizeof(C));  // cache elements per 16-byte load
  constexpr int kChunks = D / kVec;
  constexpr int kDims = D / 32;  // accumulator dims per lane
  __shared__ float qs[kG][D];    // pre-scaled queries of the KV head's query heads
  __shared__ float red_ml[kDecWarps][kG][2];
  __shared__ float red_acc[kDecWarps][kG][D];
  __shared__ int bad_block;
  const int64_t s = blockIdx.x, kh = blockIdx.y, split = blockIdx.z;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  AttnSeq seq;
  if (!ReadAttnSeq(a, s, kh == 0 && split == 0 && threadIdx.x == 0, seq)) return;
  const int64_t n = seq.n, ctx = seq.ctx;
  if (n == 0 || (a.mixed && n != 1)) return;  // a mixed step's other rows are the prefill kernel's
  const int g = static_cast<int>(a.group);
  int64_t tok_begin = 0, tok_end = ctx;
  if (SkippedEmptySplit(a, ctx, split, kDecSpan)) return;
  const bool partials = a.num_splits > 1 && !OneSplitHoldsAll(a, ctx, kDecSpan);
  if (a.num_splits > 1) {  // a whole tile for every warp of the CTA per split
    const int64_t chunk = DecodeSplitChunk(a, ctx, kDecSpan);
    tok_begin = split * chunk;
    tok_end = min(tok_end, tok_begin + chunk);
  }
  if (!CheckAttnBlocks(a, s, tok_begin, tok_end, &bad_block)) return;  // uniform
  const int32_t* table = a.block_tables + s * a.max_blocks;
  const C* kc = static_cast<const C*>(a.key_cache);
  const C* vc = static_cast<const C*>(a.value_cache);
  const T* query = static_cast<const T*>(a.query);
  // An FP8 cache's scales: k_scale multiplies every score (folded into the query), v_scale
  // the weighted sum (applied to the result).
  constexpr bool kFp8 = std::is_same_v<Cache, Fp8>;
  const float q_scale = kFp8 ? a.scale * a.k_scale : a.scale;
  const float o_scale = kFp8 ? a.v_scale : 1.0f;

  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = seq.q0 + r, pos = ctx - n + r;
    const int64_t end = min(tok_end, pos + 1);  // this row sees tokens 0..pos
    __syncthreads();                            // the previous row's buffers are consumed
    for (int e = threadIdx.x; e < g * D; e += blockDim.x) {
      const int h = e / D, i = e - h * D;
      qs[h][i] = Tag::Load(query[(t * a.Hq + kh * g + h) * D + i]) * q_scale;
    }
    __syncthreads();
    float m[kG], l[kG], acc[kG][kDims];
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      m[h] = -INFINITY;
      l[h] = 0.0f;
#pragma unroll
      for (int k = 0; k < kDims; ++k) acc[h][k] = 0.0f;
    }
    for (int64_t tile = tok_begin + static_cast<int64_t>(warp) * kDecTile; tile < end; tile += kDecWarps * kDecTile) {
      const int64_t tok = tile + lane;
      const bool valid = tok < end;
      int64_t row = 0;  // this lane's token's offset in the caches
      if (valid) row = CacheRowOffset(a, table, kh, tok, D);
      float sc[kG];
#pragma unroll
      for (int h = 0; h < kG; ++h) sc[h] = 0.0f;
      if (valid) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          float kf[kVec];
          CacheVec16<Cache>(__ldg(reinterpret_cast<const uint4*>(kc + row + c * kVec)), kf);
#pragma unroll
          for (int h = 0; h < kG; ++h)
            if (h < g) {
#pragma unroll
              for (int u = 0; u < kVec; ++u) sc[h] += qs[h][c * kVec + u] * kf[u];
            }
        }
      }
      float p[kG];
#pragma unroll
      for (int h = 0; h < kG; ++h) {
        if (h >= g) continue;
        const float m_new = fmaxf(m[h], WarpMax(valid ? sc[h] : -INFINITY));  // finite: lane 0 is valid
        const float rescale = expf(m[h] - m_new);                           // 0 on the first tile
        p[h] = valid ? expf(sc[h] - m_new) : 0.0f;
        l[h] = l[h] * rescale + WarpSum(p[h]);
#pragma unroll
        for (int k = 0; k < kDims; ++k) acc[h][k] *= rescale;
        m[h] = m_new;
      }
      // acc += p_j * v_j over the tile's rows, kVRows at a time: their loads are issued
      // together, then used (a row past the tile's count reads the lane's row-0 offset, a
      // valid address, and is unused). Loading all 32 rows before the scores measured
      // slower (more registers, fewer CTAs per SM).
      const int count = static_cast<int>(min(static_cast<int64_t>(kDecTile), end - tile));
      for (int j0 = 0; j0 < count; j0 += kVRows) {
        LaneRaw<Cache, kDims> vr[kVRows];
#pragma unroll
        for (int u = 0; u < kVRows; ++u)
          vr[u] = LoadLane<Cache, kDims>(vc + __shfl_sync(0xFFFFFFFFu, row, j0 + u) + lane * kDims);
#pragma unroll
        for (int u = 0; u < kVRows; ++u) {
          if (j0 + u >= count) break;  // warp-uniform
          float vf[kDims];
          WidenLane<Cache, kDims>(vr[u], vf);
#pragma unroll
          for (int h = 0; h < kG; ++h) {
            if (h >= g) continue;
            const float pj = __shfl_sync(0xFFFFFFFFu, p[h], j0 + u);
#pragma unroll
            for (int k = 0; k < kDims; ++k) acc[h][k] += pj * vf[k];
          }
        }
      }
    }
    // Merge the warps: weights e^(m_w - M); a warp that saw no token has m = -inf.
#pragma unroll
    for (int h = 0; h < kG; ++h) {
      if (h >= g) continue;
      if (lane == 0) {
        red_ml[warp][h][0] = m[h];
        red_ml[warp][h][1] = l[h];
      }
#pragma unroll
      for (int k = 0; k < kDims; ++k) red_acc[warp][h][lane * kDims + k] = acc[h][k];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < g * D; e += blockDim.x) {
      const int h = e / D, d = e - h * D;
      float M = -INFINITY;
#pragma unroll
      for (int w = 0; w < kDecWarps; ++w) M = fmaxf(M, red_ml[w][h][0]);
      float L = 0.0f, O = 0.0f;
#pragma unroll
      for (int w = 0; w < kDecWarps; ++w) {
        const float mw = red_ml[w][h][0];
        const float wt = mw == -INFINITY ? 0.0f : expf(mw - M);
        L += red_ml[w][h][1] * wt;
        O += red_acc[w][h][d] * wt;
      }
      const int64_t unit = t * a.Hq + kh * g + h;
      if (partials) {  // a split past the row's position leaves (-inf, 0, 0)
        const int64_t at = split * a.T * a.Hq + unit;
        if (d == 0) {
          a.part_ml[2 * at] = M;
          a.part_ml[2 * at + 1] = L;
        }
        a.part_acc[at * D + d] = O * o_scale;
      } else if (a.num_splits > 1) {
        StoreAttnOut<Tag>(a, unit * D + d, OneSplitOut(O * o_scale, L));
      } else {
        StoreAttnOut<Tag>(a, unit * D + d, O * o_scale / L);
      }
    }
  }
}

template <typename Tag, typename Cache, int D, int kG>
__global__ void __launch_bounds__(kDecWarps * 32) PagedDecodeKernel(AttnArgs a) {
  PdlWait();
  PagedDecodeRows<Tag, Cache, D, kG>(a);
  CombineSplitsInLastCta<Tag>(a, kDecSpan);
}

// Below this many sequences the general kernel's decode step measured faster on the H200
// than the CUDA-core decode kernel (bench/README.md: one sequence lost 7-12%, sixteen
// gained 7%). The tensor-core kernel (BF16 queries over a BF16 cache) takes every batch: at
// one sequence it measured 7-20% faster per step than the general kernel (bench/README.md).
constexpr int64_t kDecodeMinSeqs = 8;

// VT_CUDA_ATTN_DECODE: "0" never (A/B runs), "always" at any batch (tests), else from
// kDecodeMinSeqs sequences, or from one when the tensor-core kernel takes the step. Read at
// each call, so a test can set it.
bool DecodeKernelOn(int64_t S, bool mma) {
  const char* v = std::getenv("VT_CUDA_ATTN_DECODE");
  if (v != nullptr && std::strcmp(v, "0") == 0) return false;
  if (v != nullptr && std::strcmp(v, "always") == 0) return true;
  return mma || S >= kDecodeMinSeqs;
}

template <typename Tag, typename Cache, int D>
void LaunchForD(CudaQueue& cq, const AttnArgs& a) {
  const dim3 grid(static_cast<unsigned>(a.S), static_cast<unsigned>(a.Hk), static_cast<unsigned>(a.num_splits));
  if (a.group <= 1)
    LaunchOverlapped(cq, "PagedDecodeKernel", PagedDecodeKernel<Tag, Cache, D, 1>, grid, kDecWarps * 32, 0, a);
  else if (a.group <= 2)
    LaunchOverlapped(cq, "PagedDecodeKernel", PagedDecodeKernel<Tag, Cache, D, 2>, grid, kDecWarps * 32, 0, a);
  else if (a.group <= 4)
    LaunchOverlapped(cq, "PagedDecodeKernel", PagedDecodeKernel<Tag, Cache, D, 4>, grid, kDecWarps * 32, 0, a);
  else
    LaunchOverlapped(cq, "PagedDecodeKernel", PagedDecodeKernel<Tag, Cache, D, 8>, grid, kDecWarps * 32, 0, a);
}

template <typename Tag, typename Cache>
void LaunchForCache(CudaQueue& cq, const AttnArgs& a) {
  if (a.D == 64)
    LaunchForD<Tag, Cache, 64>(cq, a);
  else
    LaunchForD<Tag, Cache, 128>(cq, a);
}

}  // namespace

namespace {

bool DecodeGeometry(const AttnArgs& a, DType query, DType cache) {
  if (a.S > 2147483647 || a.Hk > 65535 || a.num_splits > 65535) return false;
  if ((a.D != 64 && a.D != 128) || a.group < 1 || a.group > 8 || !a.vec16) return false;
  const bool half = query == DType::kBF16 || query == DType::kF16;
  return half && (cache == query || cache == DType::kF8E4M3);
}

}  // namespace

bool DecodeKernelFitsMixed(const AttnArgs& a, DType query, DType cache) {
  return DecodeGeometry(a, query, cache) && DecodeKernelOn(a.S, DecodeMmaTakes(a, query, cache));
}

// A decode step over an F8E4M3 cache that the tensor-core kernel takes runs it at any batch
// (at one sequence over 4k tokens the general kernel took twice its time, bench/README.md);
// a mixed step over such a cache keeps the rule of DecodeKernelFitsMixed.
bool DecodeKernelFits(const AttnArgs& a, DType query, DType cache) {
  if (a.T != a.S || !DecodeGeometry(a, query, cache)) return false;
  return DecodeKernelOn(a.S, DecodeMmaTakes(a, query, cache) || DecodeMmaFp8Takes(a, query, cache));
}

void LaunchDecode(CudaQueue& cq, const AttnArgs& a, DType query, DType cache) {
  g_decode_launches.fetch_add(1, std::memory_order_relaxed);
  if (LaunchDecodeMma(cq, a, query, cache)) return;  // BF16 queries (BF16 or F8E4M3 caches): tensor cores
  const bool fp8 = cache == DType::kF8E4M3;
  if (query == DType::kBF16) {
    if (fp8)
      LaunchForCache<Bf16, Fp8>(cq, a);
    else
      LaunchForCache<Bf16, Bf16>(cq, a);
  } else {
    if (fp8)
      LaunchForCache<F16, Fp8>(cq, a);
    else
      LaunchForCache<F16, F16>(cq, a);
  }
}

int64_t DecodeAttentionLaunches() { return g_decode_launches.load(std::memory_order_relaxed); }

}  // namespace vt::cuda
