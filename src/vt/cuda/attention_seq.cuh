// Internal to the CUDA PagedAttention kernels: one sequence's metadata, checked the same way
// by the decode (attention.cu) and the tensor-core prefill (attention_prefill.cu) kernels.
#pragma once

#include <cstdint>

#include "vt/cuda/attention.h"
#include "vt/cuda/device_error.cuh"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"

namespace vt::cuda {

// Writes output element i, v rounded to Tag's type, and (a.out8 set) its FP8 code: the
// bytes of QuantFp8Static over the written output (QuantFp8Kernel's arithmetic).
template <typename Tag>
__device__ __forceinline__ void StoreAttnOut(const AttnArgs& a, int64_t i, float v) {
  const typename Tag::T r = Tag::Store(v);
  static_cast<typename Tag::T*>(a.out)[i] = r;
  if (a.out8 != nullptr) a.out8[i] = QuantizeFp8KeepNan(Tag::Load(r), a.out8_inv);
}

// The offset in the caches [num_blocks, block_size, Hk, D] of token tok's row of KV head kh,
// the sequence's block table given.
__device__ __forceinline__ int64_t CacheRowOffset(const AttnArgs& a, const int32_t* table, int64_t kh, int64_t tok,
                                                  int64_t D) {
  const int64_t block = table[tok / a.block_size];
  return ((block * a.block_size + tok % a.block_size) * a.Hk + kh) * D;
}

// The tokens of each of num_splits splits of a context of ctx tokens: ceil(ctx / num_splits)
// rounded up to whole spans of the kernel's tile (split p covers [p·chunk, (p + 1)·chunk)).
__device__ __forceinline__ int64_t SplitChunk(int64_t ctx, int64_t num_splits, int64_t span) {
  return ((ctx + num_splits - 1) / num_splits + span - 1) / span * span;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  return v;
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

// Every block of a sequence's table that covers cached tokens [tok_begin, tok_end) must be
// in the cache; a bad id is recorded. Call with every thread of the CTA (two barriers);
// returns false, uniformly, when one is bad.
__device__ __forceinline__ bool CheckAttnBlocks(const AttnArgs& a, int64_t s, int64_t tok_begin, int64_t tok_end,
                                                int* bad_block) {
  const int32_t* table = a.block_tables + s * a.max_blocks;
  if (threadIdx.x == 0) *bad_block = 0;
  __syncthreads();
  for (int64_t b = tok_begin / a.block_size + threadIdx.x; b * a.block_size < tok_end; b += blockDim.x) {
    const int64_t id = table[b];
    if (id < 0 || id >= a.num_blocks) {
      *bad_block = 1;
      RecordIndexError(a.err, IndexError::kAttnBlockId, s, id, a.num_blocks, b);
    }
  }
  __syncthreads();
  return *bad_block == 0;
}

struct AttnSeq {
  int64_t q0, q1, n, ctx;  // query rows [q0, q1), n = q1 - q0, ctx tokens of context
};

// Reads sequence s's query range and context length. The thread with `report` set records
// what is inconsistent (once per sequence). Returns false when the sequence must be skipped;
// every thread reads the same values, so the answer is uniform.
__device__ __forceinline__ bool ReadAttnSeq(const AttnArgs& a, int64_t s, bool report, AttnSeq& q) {
  q.q0 = a.query_start_loc[s];
  q.q1 = a.query_start_loc[s + 1];
  q.ctx = a.seq_lens[s];
  q.n = q.q1 - q.q0;
  if (report) {
    if (s == 0 && q.q0 != 0) RecordIndexError(a.err, IndexError::kAttnQueryStartRange, 0, q.q0, a.T);
    if (s == a.S - 1 && q.q1 != a.T) RecordIndexError(a.err, IndexError::kAttnQueryStartRange, a.S, q.q1, a.T);
    if (q.n < 0)
      RecordIndexError(a.err, IndexError::kAttnQueryStartOrder, s, q.q1, 0, q.q0);
    else if (q.n > q.ctx)
      RecordIndexError(a.err, IndexError::kAttnQueryRows, s, q.ctx, 0, q.n);
    if (q.ctx > a.max_blocks * a.block_size)
      RecordIndexError(a.err, IndexError::kAttnSeqLen, s, q.ctx, a.max_blocks, a.block_size);
  }
  return q.q0 >= 0 && q.n >= 0 && q.q1 <= a.T && q.n <= q.ctx && q.ctx <= a.max_blocks * a.block_size;
}

// Work items without a scan. A kernel gives sequence s ceil(n_s * per_row / unit) CTAs
// ("items": `unit` query vectors each, per_row vectors a row). Items are numbered so that
// sequence s's begin at I_s = q0_s * per_row / unit + s (integer division): I_{s+1} - I_s
// >= that count, so every sequence has room, at the cost of at most one empty item per
// sequence. The grid therefore scales with T and S, not with T * S (a decode step of S
// sequences has S..1.5 S items instead of T * S). AttnItems (attention.h) is the total.
__device__ __forceinline__ int64_t AttnItemStart(const AttnArgs& a, int64_t s, int64_t per_row, int64_t unit) {
  int64_t q0 = s >= a.S ? a.T : a.query_start_loc[s];
  q0 = q0 < 0 ? 0 : (q0 > a.T ? a.T : q0);  // bad metadata is reported by ReadAttnSeq
  return q0 * per_row / unit + s;
}

// The sequence whose items hold `item` (the last s with I_s <= item: a binary search over
// query_start_loc) and the item's index k within it; k may exceed the sequence's own count
// (its spare item), which the caller treats as empty. Uniform across the CTA.
__device__ __forceinline__ void AttnFindItem(const AttnArgs& a, int64_t item, int64_t per_row, int64_t unit,
                                             int64_t& s, int64_t& k) {
  int64_t lo = 0, hi = a.S - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (AttnItemStart(a, mid, per_row, unit) <= item)
      lo = mid;
    else
      hi = mid - 1;
  }
  s = lo;
  k = item - AttnItemStart(a, lo, per_row, unit);
}

// Every sequence's metadata is checked once, by the thread that passes s = its item index
// (items >= S, so each s < S has one), whatever items the search gives its rows.
__device__ __forceinline__ void ReportAttnSeq(const AttnArgs& a, int64_t item) {
  if (item < a.S) {
    AttnSeq unused;
    ReadAttnSeq(a, item, true, unused);
  }
}

}  // namespace vt::cuda
