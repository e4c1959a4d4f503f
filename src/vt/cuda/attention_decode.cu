// CUDA PagedAttention for decode steps (one query row per sequence): the PagedAttention
// contract of vt/ops/attention.h, over the grid (sequence, KV head, split).
//
// A CTA of kDecWarps warps serves one (sequence, KV head) and all kG >= group query heads
// that read it (GQA heads share every K and V load). Warp w takes tiles w, w + kDecWarps,
// ... of 32 cached tokens. For scores, lane j owns token j of a tile: its K row comes
// straight from global memory in 16-byte loads, converted to f32 (an F8E4M3 byte as
// KvCacheDequantizeFp8), and dotted with every head's pre-scaled query staged in shared
// memory. Each head keeps its running max and sum (online softmax, f32) per warp. For the
// weighted sum, lane j owns dims [j*D/32, (j+1)*D/32) of every head's accumulator, and the
// tile's V rows are read one row per step across the warp (coalesced). At the end the
// warps' (max, sum, accumulator) triples are merged through shared memory, and the result
// is rounded once to the output dtype, or left as a split's partial for AttnCombineKernel
// (attention.cu) when the context is split across CTAs (flash-decoding).
// A sequence with n != 1 rows (possible only if another one has none, as T == S) is served
// row by row, each row seeing tokens 0..its position. Metadata is checked on the device as
// by the general kernel (attention_seq.cuh).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "vt/cuda/attention.h"
#include "vt/cuda/attention_seq.cuh"
#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/fp8_stream.cuh"
#include "vt/cuda/kernels.h"
#include "vt/ops/attention.h"

namespace vt::cuda {

namespace {

constexpr int kDecWarps = 4;
constexpr int kDecTile = 32;  // tokens per warp step (one per lane)
constexpr int kVRows = 8;     // V rows whose loads are in flight together

std::atomic<int64_t> g_decode_launches{0};

// 16 bytes of cache elements -> floats (kVec of them).
template <typename Cache>
__device__ __forceinline__ void CacheVec16(const uint4 raw, float (&f)[16 / sizeof(typename Cache::T)], float scale) {
  if constexpr (std::is_same_v<Cache, Fp8>) {
    Fp8x16ToFloat(raw, f);  // exact, then times the scale: KvCacheDequantizeFp8
#pragma unroll
    for (int u = 0; u < 16; ++u) f[u] *= scale;
  } else {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = Cache::Load(static_cast<uint16_t>(w[i] & 0xFFFFu));
      f[2 * i + 1] = Cache::Load(static_cast<uint16_t>(w[i] >> 16));
    }
  }
}

// kDims consecutive cache elements at p (aligned to their size) -> floats.
template <typename Cache, int kDims>
__device__ __forceinline__ void CacheLane(const typename Cache::T* p, float (&f)[kDims], float scale) {
  using C = typename Cache::T;
  constexpr int kBytes = kDims * static_cast<int>(sizeof(C));
  C e[kDims];
  if constexpr (kBytes == 8) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
    std::memcpy(e, &v, 8);
  } else if constexpr (kBytes == 4) {
    const uint32_t v = __ldg(reinterpret_cast<const unsigned int*>(p));
    std::memcpy(e, &v, 4);
  } else {
    static_assert(kBytes == 2, "lane widths of 2, 4 or 8 bytes");
    const uint16_t v = __ldg(reinterpret_cast<const unsigned short*>(p));
    std::memcpy(e, &v, 2);
  }
#pragma unroll
  for (int k = 0; k < kDims; ++k) {
    if constexpr (std::is_same_v<Cache, Fp8>)
      f[k] = KvCacheDequantizeFp8(e[k], scale);
    else
      f[k] = Cache::Load(e[k]);
  }
}

template <typename Tag, typename Cache, int D, int kG>
__global__ void __launch_bounds__(kDecWarps * 32) PagedDecodeKernel(AttnArgs a) {
  PdlWait();
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
  if (n == 0) return;
  const int g = static_cast<int>(a.group);
  int64_t tok_begin = 0, tok_end = ctx;
  if (a.num_splits > 1) {  // a whole tile for every warp of the CTA per split
    constexpr int64_t kSpan = kDecWarps * kDecTile;
    const int64_t chunk = ((ctx + a.num_splits - 1) / a.num_splits + kSpan - 1) / kSpan * kSpan;
    tok_begin = split * chunk;
    tok_end = min(tok_end, tok_begin + chunk);
  }
  if (!CheckAttnBlocks(a, s, tok_begin, tok_end, &bad_block)) return;  // uniform
  const int32_t* table = a.block_tables + s * a.max_blocks;
  const C* kc = static_cast<const C*>(a.key_cache);
  const C* vc = static_cast<const C*>(a.value_cache);
  const T* query = static_cast<const T*>(a.query);

  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = seq.q0 + r, pos = ctx - n + r;
    const int64_t end = min(tok_end, pos + 1);  // this row sees tokens 0..pos
    __syncthreads();                            // the previous row's buffers are consumed
    for (int e = threadIdx.x; e < g * D; e += blockDim.x) {
      const int h = e / D, i = e - h * D;
      qs[h][i] = Tag::Load(query[(t * a.Hq + kh * g + h) * D + i]) * a.scale;
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
      if (valid) {
        const int64_t blk = table[tok / a.block_size];
        row = ((blk * a.block_size + tok % a.block_size) * a.Hk + kh) * D;
      }
      float sc[kG];
#pragma unroll
      for (int h = 0; h < kG; ++h) sc[h] = 0.0f;
      if (valid) {
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          float kf[kVec];
          CacheVec16<Cache>(__ldg(reinterpret_cast<const uint4*>(kc + row + c * kVec)), kf, a.k_scale);
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
      // V rows kVRows at a time: their loads are issued together, then used (a row past
      // the tile's count reads the lane's own row 0 offset, a valid address, and is unused).
      const int count = static_cast<int>(min(static_cast<int64_t>(kDecTile), end - tile));
      for (int j0 = 0; j0 < count; j0 += kVRows) {
        float vf[kVRows][kDims];
#pragma unroll
        for (int u = 0; u < kVRows; ++u) {
          const int64_t vrow = __shfl_sync(0xFFFFFFFFu, row, j0 + u);
          CacheLane<Cache, kDims>(vc + vrow + lane * kDims, vf[u], a.v_scale);
        }
#pragma unroll
        for (int u = 0; u < kVRows; ++u) {
          if (j0 + u >= count) break;  // warp-uniform
#pragma unroll
          for (int h = 0; h < kG; ++h) {
            if (h >= g) continue;
            const float pj = __shfl_sync(0xFFFFFFFFu, p[h], j0 + u);
#pragma unroll
            for (int k = 0; k < kDims; ++k) acc[h][k] += pj * vf[u][k];
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
      if (a.num_splits > 1) {  // a split past the row's position leaves (-inf, 0, 0)
        const int64_t at = split * a.T * a.Hq + unit;
        if (d == 0) {
          a.part_ml[2 * at] = M;
          a.part_ml[2 * at + 1] = L;
        }
        a.part_acc[at * D + d] = O;
      } else {
        static_cast<T*>(a.out)[unit * D + d] = Tag::Store(O / L);
      }
    }
  }
}

// Below this many sequences the general kernel's decode step measured faster on the H200
// (bench/README.md: one sequence lost 7-12%, sixteen gained 7%).
constexpr int64_t kDecodeMinSeqs = 8;

// VT_CUDA_ATTN_DECODE: "0" never (A/B runs), "always" at any batch (tests), else from
// kDecodeMinSeqs sequences. Read at each call, so a test can set it.
bool DecodeKernelOn(int64_t S) {
  const char* v = std::getenv("VT_CUDA_ATTN_DECODE");
  if (v != nullptr && std::strcmp(v, "0") == 0) return false;
  if (v != nullptr && std::strcmp(v, "always") == 0) return true;
  return S >= kDecodeMinSeqs;
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

bool DecodeKernelFits(const AttnArgs& a, DType query, DType cache) {
  if (a.T != a.S || a.S > 2147483647 || a.Hk > 65535 || a.num_splits > 65535) return false;
  if ((a.D != 64 && a.D != 128) || a.group < 1 || a.group > 8 || !a.vec16) return false;
  const bool half = query == DType::kBF16 || query == DType::kF16;
  if (!half || (cache != query && cache != DType::kF8E4M3)) return false;
  return DecodeKernelOn(a.S);
}

void LaunchDecode(CudaQueue& cq, const AttnArgs& a, DType query, DType cache) {
  g_decode_launches.fetch_add(1, std::memory_order_relaxed);
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
