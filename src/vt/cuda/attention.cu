// CUDA KvCacheWrite and PagedAttention over vLLM's paged cache layout
// [num_blocks, block_size, Hk, D].
//
// PagedAttention: a CTA serves one (sequence, KV head) and up to kWarps query vectors
// (query row, query head of that KV head's group), one warp each, so GQA/MQA heads share
// every cache tile the CTA stages. Each tile of kTile cached tokens is converted to f32 in
// shared memory (16-byte loads where the head allows); lane j scores token j of the tile,
// the warp updates its running max and sum (online softmax, f32), and each lane
// accumulates D/32 output dims. The result is rounded once to the output dtype.
// Causality: a row at position p sees tokens 0..p. When a step has too few CTAs to fill
// the GPU (decode), each sequence's context is split into num_splits ranges of whole tiles
// handled by separate CTAs (flash-decoding); each writes its running max, sum and
// unnormalised output, and AttnCombineKernel merges them.
// An F8E4M3 cache is decoded while a tile is staged (16 bytes at a time where rows allow),
// each value KvCacheDequantizeFp8(byte, scale); the decode and tensor-core prefill kernels
// widen the bytes exactly and fold the scales into the scores and the output.
// KvCacheWrite quantizes with KvCacheQuantizeFp8.
// The kernels check the index metadata they use (the CPU kernels' checks, made on the
// device so that no op waits for the host): nothing is read or written out of bounds, and
// the first bad value is reported as a vt::Error at the next synchronization
// (device_error.h).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <cmath>
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

constexpr int kTile = 32;   // cached tokens per shared-memory tile (one per lane)
constexpr int kWarps = 8;   // query vectors per CTA
constexpr int kMaxD = 256;  // head sizes up to this (the accumulators live in registers)
constexpr int kDimsPerLane = kMaxD / 32;
constexpr int64_t kMaxSplits = 32;  // context ranges of one sequence handled by separate CTAs

std::atomic<int64_t> g_fp8_attention{0}, g_fp8_cache_write{0}, g_fp8_qk_norm_rope{0}, g_fused_combines{0};
std::atomic<int64_t> g_skip_empty_launches{0}, g_one_split_launches{0};

// VT_CUDA_ATTN_FUSED_COMBINE=0 combines a decode kernel's splits by AttnCombineKernel after
// it, as the general kernel's (A/B runs, tests). Read at each call, so a test can set it.
bool FusedCombineOn() {
  return SwitchOn("VT_CUDA_ATTN_FUSED_COMBINE");
}

// VT_CUDA_ATTN_SKIP_EMPTY_SPLITS=0: the CTAs of empty splits write their (-inf, 0, 0) and
// arrive, as before (A/B runs). Read at each call.
bool SkipEmptySplitsOn() { return SwitchOn("VT_CUDA_ATTN_SKIP_EMPTY_SPLITS"); }

// The longest context a decode launch that skips empty splits serves by one CTA per KV head
// (AttnArgs::one_split_tokens): kOneSplitTokens, or VT_CUDA_ATTN_ONE_SPLIT_TOKENS=n (0: none;
// A/B runs, tests). Read at each call. bench/README.md has the A/B behind the value.
constexpr int64_t kOneSplitTokens = 256;
int64_t OneSplitTokens() {
  const char* v = std::getenv("VT_CUDA_ATTN_ONE_SPLIT_TOKENS");
  const long long n = v != nullptr ? std::atoll(v) : -1;
  return n >= 0 ? n : kOneSplitTokens;
}

// CTAs per SM a step should have before its contexts are not split: 2 for the general
// kernel (8 warps a CTA), 4 for the decode kernel (4 warps a CTA; of 2, 4, 8 and 16 on an
// 8-sequence, 4k-context 8B step, 4 measured fastest). VT_CUDA_ATTN_CTAS_PER_SM=n sets
// both, for A/B runs.
int64_t SplitTargetPerSm(bool decode) {
  if (const char* v = std::getenv("VT_CUDA_ATTN_CTAS_PER_SM"); v != nullptr && std::atoi(v) > 0) return std::atoi(v);
  return decode ? 4 : 2;
}

// Keys and values of any float dtype quantized into an F8E4M3 cache, one element a thread.
__global__ void KvWriteFp8Kernel(uint8_t* kc, uint8_t* vc, const void* key, const void* value, DType dtype,
                                 const int64_t* slots, int64_t T, int64_t width, int64_t num_slots, float k_scale,
                                 float v_scale, IndexErrorRecord* err) {
  const int64_t n = T * width;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t t = e / width, i = e - t * width;
    const int64_t slot = slots[t];
    if (slot < 0) continue;  // padding: not written
    if (slot >= num_slots) {
      if (i == 0) RecordIndexError(err, IndexError::kKvSlot, t, slot, num_slots);
      continue;
    }
    kc[slot * width + i] = KvCacheQuantizeFp8(LoadAny(key, dtype, e), k_scale);
    vc[slot * width + i] = KvCacheQuantizeFp8(LoadAny(value, dtype, e), v_scale);
  }
}

template <typename W>
__global__ void KvWriteKernel(W* kc, W* vc, const W* key, const W* value, const int64_t* slots, int64_t T,
                              int64_t row_words, int64_t num_slots, IndexErrorRecord* err) {
  const int64_t n = T * row_words;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int64_t t = e / row_words, i = e - t * row_words;
    const int64_t slot = slots[t];
    if (slot < 0) continue;  // padding: not written
    if (slot >= num_slots) {
      if (i == 0) RecordIndexError(err, IndexError::kKvSlot, t, slot, num_slots);
      continue;
    }
    kc[slot * row_words + i] = key[e];
    vc[slot * row_words + i] = value[e];
  }
}

template <typename W>
void LaunchKvWrite(CudaQueue& cq, const Tensor& key, const Tensor& value, const Tensor& kc, const Tensor& vc,
                   const Tensor& slots, int64_t row_bytes) {
  const int64_t T = slots.dim(0), words = row_bytes / static_cast<int64_t>(sizeof(W));
  KvWriteKernel<W><<<GridFor(T * words, 256, cq), 256, 0, cq.stream>>>(
      static_cast<W*>(kc.data()), static_cast<W*>(vc.data()), static_cast<const W*>(key.data()),
      static_cast<const W*>(value.data()), slots.data_as<int64_t>(), T, words, kc.dim(0) * kc.dim(1),
      cq.index_errors);
  VT_CUDA_CHECK_LAUNCH("KvWriteKernel");
}

void KvCacheWriteCuda(const Queue& q, const Tensor& key, const Tensor& value, const Tensor& key_cache,
                      const Tensor& value_cache, const Tensor& slot_mapping, float k_scale, float v_scale) {
  CudaQueue& cq = Cuda(q);
  const int64_t T = slot_mapping.dim(0);
  const int64_t row_bytes = key.dim(1) * static_cast<int64_t>(DTypeSize(key.dtype()));
  if (T == 0 || row_bytes == 0) return;
  DeviceGuard guard(cq.device.index);
  if (key_cache.dtype() == DType::kF8E4M3) {
    const int64_t width = key.dim(1);
    KvWriteFp8Kernel<<<GridFor(T * width, 256, cq), 256, 0, cq.stream>>>(
        static_cast<uint8_t*>(key_cache.data()), static_cast<uint8_t*>(value_cache.data()), key.data(), value.data(),
        key.dtype(), slot_mapping.data_as<int64_t>(), T, width, key_cache.dim(0) * key_cache.dim(1), k_scale,
        v_scale, cq.index_errors);
    VT_CUDA_CHECK_LAUNCH("KvWriteFp8Kernel");
    g_fp8_cache_write.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const auto aligned = [&](size_t a) {
    bool ok = row_bytes % static_cast<int64_t>(a) == 0;
    for (const Tensor* t : {&key, &value, &key_cache, &value_cache})
      ok = ok && reinterpret_cast<uintptr_t>(t->data()) % a == 0;
    return ok;
  };
  if (aligned(16))
    LaunchKvWrite<uint4>(cq, key, value, key_cache, value_cache, slot_mapping, row_bytes);
  else if (aligned(4))
    LaunchKvWrite<uint32_t>(cq, key, value, key_cache, value_cache, slot_mapping, row_bytes);
  else
    LaunchKvWrite<uint16_t>(cq, key, value, key_cache, value_cache, slot_mapping, row_bytes);
}



// Tag: the query's and output's dtype; kFp8: the caches are F8E4M3 (else of Tag's dtype).
template <typename Tag, bool kFp8>
__global__ void __launch_bounds__(kWarps * 32) PagedAttentionKernel(AttnArgs a) {
  PdlWait();
  using T = typename Tag::T;
  using C = std::conditional_t<kFp8, uint8_t, T>;  // a cache element
  extern __shared__ float smem[];
  __shared__ int64_t tok_src[kTile];  // cache offset of each token of the tile
  const int64_t D = a.D, ld = D + 1;  // odd row stride: lane j reading row j is conflict-free
  float* ks = smem;                   // [kTile][ld]
  float* vs = ks + kTile * ld;        // [kTile][ld]
  float* qs = vs + kTile * ld;        // [kWarps][D], pre-scaled queries
  const int64_t kh = blockIdx.y;
  const int64_t item = blockIdx.x / a.num_splits, split = blockIdx.x - item * a.num_splits;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  if (kh == 0 && split == 0 && threadIdx.x == 0) ReportAttnSeq(a, item);
  int64_t s, xg;  // the sequence, and this CTA's group of kWarps query vectors within it
  AttnFindItem(a, item, a.group, kWarps, s, xg);
  AttnSeq seq;
  if (xg < 0 || !ReadAttnSeq(a, s, false, seq)) return;
  const int64_t q0 = seq.q0, n = seq.n, ctx = seq.ctx;
  const int64_t nvec = n * a.group;
  const int64_t v0 = xg * kWarps;
  if (v0 >= nvec) return;  // uniform across the CTA
  const int64_t first_pos = ctx - n;
  const int64_t v = v0 + warp;
  const bool active = v < nvec;
  const int64_t row = active ? v / a.group : 0;
  const int64_t head = kh * a.group + (active ? v % a.group : 0);
  const int64_t pos = first_pos + row;  // this warp's row sees tokens 0..pos
  const int64_t cta_last = first_pos + (min(v0 + kWarps, nvec) - 1) / a.group;
  // The cached tokens this CTA reads: all it sees, or its split's whole tiles of them.
  int64_t tok_begin = 0, tok_end = cta_last + 1;
  if (a.num_splits > 1) {
    const int64_t chunk = SplitChunk(ctx, a.num_splits, kTile);
    tok_begin = split * chunk;
    tok_end = min(tok_end, tok_begin + chunk);
  }
  const int64_t t = q0 + row;
  const T* qp = static_cast<const T*>(a.query) + (t * a.Hq + head) * D;
  float* qw = qs + warp * D;
  if (active)
    for (int64_t i = lane; i < D; i += 32) qw[i] = Tag::Load(qp[i]) * a.scale;

  const C* kc = static_cast<const C*>(a.key_cache);
  const C* vc = static_cast<const C*>(a.value_cache);
  const int32_t* table = a.block_tables + s * a.max_blocks;
  // Every block this CTA will read must be in the cache.
  __shared__ int bad_block;
  if (!CheckAttnBlocks(a, s, tok_begin, tok_end, &bad_block)) return;  // uniform
  float m = -INFINITY, l = 0.0f;
  float acc[kDimsPerLane];
#pragma unroll
  for (int k = 0; k < kDimsPerLane; ++k) acc[k] = 0.0f;

  constexpr int kPerVec = 16 / sizeof(C);
  for (int64_t tok0 = tok_begin; tok0 < tok_end; tok0 += kTile) {
    const int count = static_cast<int>(min(static_cast<int64_t>(kTile), tok_end - tok0));
    __syncthreads();  // the previous tile is consumed (and the queries are staged)
    if (threadIdx.x < count) {
      tok_src[threadIdx.x] = CacheRowOffset(a, table, kh, tok0 + threadIdx.x, D);
    }
    __syncthreads();
    if (a.vec16) {
      const int vpr = static_cast<int>(D) / kPerVec;
      for (int e = threadIdx.x; e < count * vpr; e += blockDim.x) {
        const int j = e / vpr, c = (e - j * vpr) * kPerVec;
        const uint4 kv = *reinterpret_cast<const uint4*>(kc + tok_src[j] + c);
        const uint4 vv = *reinterpret_cast<const uint4*>(vc + tok_src[j] + c);
        if constexpr (kFp8) {
          float kf[16], vf[16];
          Fp8x16ToFloat(kv, kf);  // exact decode; times the scale as KvCacheDequantizeFp8
          Fp8x16ToFloat(vv, vf);
#pragma unroll
          for (int u = 0; u < 16; ++u) {
            ks[j * ld + c + u] = kf[u] * a.k_scale;
            vs[j * ld + c + u] = vf[u] * a.v_scale;
          }
        } else {
          const T* ke = reinterpret_cast<const T*>(&kv);
          const T* ve = reinterpret_cast<const T*>(&vv);
#pragma unroll
          for (int u = 0; u < kPerVec; ++u) {
            ks[j * ld + c + u] = Tag::Load(ke[u]);
            vs[j * ld + c + u] = Tag::Load(ve[u]);
          }
        }
      }
    } else {
      for (int64_t e = threadIdx.x; e < count * D; e += blockDim.x) {
        const int64_t j = e / D, i = e - j * D;
        if constexpr (kFp8) {
          ks[j * ld + i] = KvCacheDequantizeFp8(kc[tok_src[j] + i], a.k_scale);
          vs[j * ld + i] = KvCacheDequantizeFp8(vc[tok_src[j] + i], a.v_scale);
        } else {
          ks[j * ld + i] = Tag::Load(kc[tok_src[j] + i]);
          vs[j * ld + i] = Tag::Load(vc[tok_src[j] + i]);
        }
      }
    }
    __syncthreads();
    if (!active || tok0 > pos) continue;  // warp-uniform; every warp still reaches each barrier
    const int64_t valid = min(static_cast<int64_t>(count), pos + 1 - tok0);
    float score = -INFINITY;
    if (lane < valid) {
      const float* kr = ks + lane * ld;
      float d0 = 0.0f, d1 = 0.0f;
      int64_t i = 0;
      for (; i + 2 <= D; i += 2) {
        d0 += qw[i] * kr[i];
        d1 += qw[i + 1] * kr[i + 1];
      }
      if (i < D) d0 += qw[i] * kr[i];
      score = d0 + d1;
    }
    const float m_new = fmaxf(m, WarpMax(score));
    const float rescale = expf(m - m_new);  // 0 on the first tile (m = -inf)
    const float p = lane < valid ? expf(score - m_new) : 0.0f;
    l = l * rescale + WarpSum(p);
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) acc[k] *= rescale;
    for (int j = 0; j < valid; ++j) {
      const float pj = __shfl_sync(0xFFFFFFFFu, p, j);
      const float* vr = vs + j * ld;
#pragma unroll
      for (int k = 0; k < kDimsPerLane; ++k) {
        const int64_t d = lane + 32 * k;
        if (d < D) acc[k] += pj * vr[d];
      }
    }
    m = m_new;
  }
  if (!active) return;
  const int64_t unit = t * a.Hq + head;
  if (a.num_splits > 1) {  // this split's part; a split past the row's position leaves (-inf, 0, 0)
    const int64_t at = split * a.T * a.Hq + unit;
    if (lane == 0) {
      a.part_ml[2 * at] = m;
      a.part_ml[2 * at + 1] = l;
    }
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int64_t d = lane + 32 * k;
      if (d < D) a.part_acc[at * D + d] = acc[k];
    }
    return;
  }
  const float inv = 1.0f / l;
#pragma unroll
  for (int k = 0; k < kDimsPerLane; ++k) {
    const int64_t d = lane + 32 * k;
    if (d < D) StoreAttnOut<Tag>(a, unit * D + d, acc[k] * inv);
  }
}

// Merges the splits of each (query row, head): one warp per output vector. In a mixed step
// only the rows of one-row sequences have splits (the decode kernel's); the others are the
// tensor-core prefill's and are left alone.
template <typename Tag>
__global__ void __launch_bounds__(kWarps * 32)
    AttnCombineKernel(const float* part_ml, const float* part_acc, int64_t units, int64_t D, int64_t num_splits,
                      AttnArgs a) {
  PdlWait();
  const int64_t u = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (u >= units) return;
  if (a.mixed) {  // the sequence of row t: the last s with query_start_loc[s] <= t
    const int64_t t = u / a.Hq;
    int64_t lo = 0, hi = a.S - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (a.query_start_loc[mid] <= t)
        lo = mid;
      else
        hi = mid - 1;
    }
    if (a.query_start_loc[lo + 1] - a.query_start_loc[lo] != 1) return;
  }
  float M = -INFINITY;
  for (int64_t p = 0; p < num_splits; ++p) M = fmaxf(M, part_ml[2 * (p * units + u)]);
  float L = 0.0f, o[kDimsPerLane];
#pragma unroll
  for (int k = 0; k < kDimsPerLane; ++k) o[k] = 0.0f;
  for (int64_t p = 0; p < num_splits; ++p) {
    const int64_t at = p * units + u;
    const float mp = part_ml[2 * at];
    const float w = mp == -INFINITY ? 0.0f : expf(mp - M);
    L += part_ml[2 * at + 1] * w;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int64_t d = lane + 32 * k;
      if (d < D) o[k] += part_acc[at * D + d] * w;
    }
  }
  const float inv = 1.0f / L;
#pragma unroll
  for (int k = 0; k < kDimsPerLane; ++k) {
    const int64_t d = lane + 32 * k;
    if (d < D) StoreAttnOut<Tag>(a, u * D + d, o[k] * inv);
  }
}

// PagedAttention, and with out8 (PagedAttentionQuantFp8) the codes of its output: written by
// the decode and general kernels' stores (StoreAttnOut), or by QuantFp8Static after a step
// the tensor-core prefill kernel takes part in (and after every step with
// VT_CUDA_ATTN_QUANT=0: the two-kernel form, for A/B runs; same bytes).
void RunPagedAttention(const Queue& q, const Tensor& out, const Tensor* out8, const Tensor& query,
                       const Tensor& key_cache, const Tensor& value_cache, const Tensor& block_tables,
                       const Tensor& seq_lens, const Tensor& query_start_loc, float scale, float input_scale,
                       float k_scale, float v_scale) {
  CudaQueue& cq = Cuda(q);
  AttnArgs a{};
  a.k_scale = k_scale;
  a.v_scale = v_scale;
  const bool fp8 = key_cache.dtype() == DType::kF8E4M3;
  a.D = key_cache.dim(3);
  a.Hk = key_cache.dim(2);
  a.Hq = query.dim(1) / a.D;
  a.group = a.Hq / a.Hk;
  a.block_size = key_cache.dim(1);
  a.max_blocks = block_tables.dim(1);
  a.scale = scale;
  const int64_t S = seq_lens.dim(0), T = query.dim(0);
  a.num_blocks = key_cache.dim(0);
  a.S = S;
  a.T = T;
  VT_CHECK(a.D <= kMaxD, "PagedAttention on ", ToString(cq.device), ": head size ", a.D, " exceeds the CUDA kernel's ",
           kMaxD);
  if (S == 0 || a.D == 0) return;
  VT_CHECK(a.Hk <= 65535, "PagedAttention on cuda: ", a.Hk, " KV heads exceed the grid limit of 65535");
  a.err = cq.index_errors;
  a.out = out.data();
  a.query = query.data();
  a.key_cache = key_cache.data();
  a.value_cache = value_cache.data();
  a.block_tables = block_tables.data_as<int32_t>();
  a.seq_lens = seq_lens.data_as<int32_t>();
  a.query_start_loc = query_start_loc.data_as<int32_t>();
  const size_t elem = DTypeSize(key_cache.dtype());
  a.vec16 = (a.D * static_cast<int64_t>(elem)) % 16 == 0 && reinterpret_cast<uintptr_t>(a.key_cache) % 16 == 0 &&
            reinterpret_cast<uintptr_t>(a.value_cache) % 16 == 0 &&
            reinterpret_cast<uintptr_t>(a.query) % 16 == 0 && reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  a.num_splits = 1;
  // Right after the prelude that wrote this cache (no overlapped launch between them, see
  // CudaQueue::prelude_key_cache): the tensor-core decode kernel reads ahead of its wait.
  // VT_CUDA_ATTN_EARLY_READS=0 turns it off (A/B runs, tests), read at each call.
  a.early_context = cq.prelude_key_cache == key_cache.data() && cq.prelude_launch == cq.overlap_asks &&
                    SwitchOn("VT_CUDA_ATTN_EARLY_READS");
  DeviceGuard guard(cq.device.index);
  // The tensor-core prefill (attention_prefill.cu): BF16 queries, BF16 or F8E4M3 caches.
  if (LaunchPrefillMma(cq, a, query.dtype(), key_cache.dtype())) {
    if (fp8) g_fp8_attention.fetch_add(1, std::memory_order_relaxed);
    if (out8 != nullptr) QuantFp8Static(q, *out8, out, input_scale);
    return;
  }
  // A mixed step (prompt rows beside decode rows, as serving with chunked prefill has) runs
  // as a decode step over its one-row sequences (splits and combine included) followed by
  // the tensor-core prefill over the others, when both kernels take its geometry.
  a.mixed = T != S && PrefillMmaFits(cq, a, query.dtype(), key_cache.dtype()) &&
            DecodeKernelFitsMixed(a, query.dtype(), key_cache.dtype());
  static const bool quant_in_stores = SwitchOn("VT_CUDA_ATTN_QUANT");
  const bool in_stores = out8 != nullptr && !a.mixed && quant_in_stores;
  if (in_stores) {
    a.out8 = out8->data_as<uint8_t>();
    a.out8_inv = 1.0f / input_scale;  // QuantFp8StaticCuda's
  }
  // A decode step (one row per sequence) takes the decode kernel (attention_decode.cu) when
  // its geometry allows: one CTA per (sequence, KV head). Otherwise one CTA per group of
  // kWarps query vectors of a sequence (AttnItems: T * group / kWarps + S items, so a
  // decode step has about one per sequence). Split the context when the step's CTAs would
  // not fill the GPU twice over (the decode kernel's smaller CTAs: four times over): up to
  // kMaxSplits CTAs per (item, KV head), never more than the tiles the widest block table
  // can hold.
  const bool decode = a.mixed || DecodeKernelFits(a, query.dtype(), key_cache.dtype());
  // The wide form (DecodeMmaWide) splits for at most one of its CTAs per SM (one wave: a CTA
  // takes a whole SM's registers).
  a.wide = decode && DecodeMmaWide(cq, a, query.dtype(), key_cache.dtype());
  const int64_t items = decode ? S : AttnItems(T, S, a.group, kWarps);
  const int64_t ctas = items * a.Hk, want = SplitTargetPerSm(decode) * std::max(cq.sm_count, 1);
  const int64_t max_tiles = (a.max_blocks * a.block_size + kTile - 1) / kTile;
  const int64_t splits = a.wide ? std::max<int64_t>(std::max(cq.sm_count, 1) / ctas, 1)
                                : (ctas >= want ? 1 : (want + ctas - 1) / ctas);
  a.num_splits = std::min({splits, kMaxSplits, std::max<int64_t>(max_tiles, 1)});
  Tensor part_ml, part_acc;
  if (a.num_splits > 1) {
    part_ml = Tensor::Empty({a.num_splits, T * a.Hq, 2}, DType::kF32, out.device());
    part_acc = Tensor::Empty({a.num_splits, T * a.Hq, a.D}, DType::kF32, out.device());
    a.part_ml = part_ml.data_as<float>();
    a.part_acc = part_acc.data_as<float>();
    // A decode kernel combines its splits itself (attention_split.cuh) when the step's
    // (sequence, KV head) pairs fit the queue's counters.
    if (decode && S * a.Hk <= CudaQueue::kSplitCounters && FusedCombineOn()) {
      a.split_counters = cq.split_counters;
      a.skip_empty_splits = SkipEmptySplitsOn();
      if (a.skip_empty_splits) {
        g_skip_empty_launches.fetch_add(1, std::memory_order_relaxed);
        a.one_split_tokens = OneSplitTokens();
        if (a.one_split_tokens > 0) g_one_split_launches.fetch_add(1, std::memory_order_relaxed);
      }
      g_fused_combines.fetch_add(1, std::memory_order_relaxed);
    }
  }
  VT_CHECK(items * a.num_splits < (int64_t{1} << 31), "PagedAttention on cuda: ", T, " query rows exceed the grid");
  const dim3 grid(static_cast<unsigned>(items * a.num_splits), static_cast<unsigned>(a.Hk));
  const size_t smem = static_cast<size_t>(2 * kTile * (a.D + 1) + kWarps * a.D) * sizeof(float);
  DispatchFloat(query.dtype(), "PagedAttention", [&](auto tag) {
    using Tag = decltype(tag);
    if (decode) {
      LaunchDecode(cq, a, query.dtype(), key_cache.dtype());
    } else {
      const auto kernel = fp8 ? PagedAttentionKernel<Tag, true> : PagedAttentionKernel<Tag, false>;
      if (smem > (size_t{40} << 10))  // with the static tok_src, past the 48 KiB default
        VT_CUDA_CHECK(
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      LaunchOverlapped(cq, "PagedAttentionKernel", kernel, grid, kWarps * 32, smem, a);
    }
    if (fp8) g_fp8_attention.fetch_add(1, std::memory_order_relaxed);
    if (a.num_splits > 1 && a.split_counters == nullptr) {
      const int64_t units = T * a.Hq;
      LaunchOverlapped(cq, "AttnCombineKernel", AttnCombineKernel<Tag>, static_cast<unsigned>((units + kWarps - 1) / kWarps),
                       kWarps * 32, 0, a.part_ml, a.part_acc, units, a.D, a.num_splits, a);
    }
  });
  if (a.mixed) LaunchPrefillMma(cq, a, query.dtype(), key_cache.dtype());
  if (out8 != nullptr && !in_stores) QuantFp8Static(q, *out8, out, input_scale);
}

void PagedAttentionCuda(const Queue& q, const Tensor& out, const Tensor& query, const Tensor& key_cache,
                        const Tensor& value_cache, const Tensor& block_tables, const Tensor& seq_lens,
                        const Tensor& query_start_loc, float scale, float k_scale, float v_scale) {
  RunPagedAttention(q, out, nullptr, query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, scale,
                    1.0f, k_scale, v_scale);
}

void PagedAttentionQuantFp8Cuda(const Queue& q, const Tensor& out, const Tensor& out8, const Tensor& query,
                                const Tensor& key_cache, const Tensor& value_cache, const Tensor& block_tables,
                                const Tensor& seq_lens, const Tensor& query_start_loc, float scale,
                                float input_scale, float k_scale, float v_scale) {
  RunPagedAttention(q, out, &out8, query, key_cache, value_cache, block_tables, seq_lens, query_start_loc, scale,
                    input_scale, k_scale, v_scale);
}

}  // namespace

int64_t DecodeSplitsCombinedInLaunch() { return g_fused_combines.load(std::memory_order_relaxed); }

int64_t DecodeLaunchesSkippingEmptySplits() { return g_skip_empty_launches.load(std::memory_order_relaxed); }

int64_t DecodeLaunchesWithOneSplitContexts() { return g_one_split_launches.load(std::memory_order_relaxed); }

KvFp8Launches KvCacheFp8Launches() {
  return {g_fp8_attention.load(std::memory_order_relaxed), g_fp8_cache_write.load(std::memory_order_relaxed),
          g_fp8_qk_norm_rope.load(std::memory_order_relaxed)};
}

void CountQkNormRopeFp8Launch() { g_fp8_qk_norm_rope.fetch_add(1, std::memory_order_relaxed); }

void RegisterAttentionKernels() {
  Register<OpId::kKvCacheWrite>(DeviceType::kCUDA, &KvCacheWriteCuda);
  Register<OpId::kPagedAttention>(DeviceType::kCUDA, &PagedAttentionCuda);
  Register<OpId::kPagedAttentionQuantFp8>(DeviceType::kCUDA, &PagedAttentionQuantFp8Cuda);
}

}  // namespace vt::cuda
