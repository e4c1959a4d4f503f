// Internal to the CUDA PagedAttention (attention*.cu): the arguments its kernels share, the
// decode kernels and the tensor-core prefill path.
#pragma once

#include <cstdint>

#include "vt/cuda/context.h"
#include "vt/cuda/device_error.h"
#include "vt/dtype.h"

namespace vt::cuda {

struct AttnArgs {
  void* out;
  const void* query;
  const void* key_cache;
  const void* value_cache;
  const int32_t* block_tables;
  const int32_t* seq_lens;
  const int32_t* query_start_loc;
  IndexErrorRecord* err;
  int64_t Hq, Hk, D, group, block_size, max_blocks, num_blocks, S, T;
  float scale;
  float k_scale, v_scale;  // F8E4M3 caches: each byte reads back as KvCacheDequantizeFp8(b, scale)
  int64_t num_splits;  // CTAs sharing one sequence's context (1: the output is written directly)
  float* part_ml;      // [num_splits, T * Hq, 2]: each split's running max and sum
  float* part_acc;     // [num_splits, T * Hq, D]: its unnormalised weighted sum of values
  // Decode kernels: when set, the last CTA of each (sequence, KV head) to finish combines
  // the splits itself (CombineSplitsInLastCta, attention_split.cuh); else AttnCombineKernel
  // runs after the launch. [S * Hk] counters, zero before and after.
  int32_t* split_counters;
  // Set only with split_counters (so only with num_splits > 1): the CTAs of the splits a short
  // context leaves empty return at once (attention_split.cuh); VT_CUDA_ATTN_SKIP_EMPTY_SPLITS=0
  // keeps them (A/B runs).
  bool skip_empty_splits;
  // Set only with skip_empty_splits: a context of at most this many tokens is held by split 0
  // alone, whose CTA writes the output without partials (attention_split.cuh); longer ones
  // split as num_splits says. VT_CUDA_ATTN_ONE_SPLIT_TOKENS sets it (A/B runs, tests).
  int64_t one_split_tokens;
  bool vec16;          // rows of the caches load as 16-byte vectors
  // The launch follows the prelude that wrote this cache (CudaQueue::prelude_key_cache): the
  // tensor-core decode kernel reads a one-row sequence's metadata, block table and cached
  // tokens but the newest before griddepcontrol.wait (attention_decode_mma.cu).
  bool early_context;
  // The tensor-core decode kernel's wide form takes the launch (DecodeMmaWide).
  bool wide;
  // A mixed step split in two launches: a decode kernel serves the sequences of one query
  // row and skips the others, the tensor-core prefill serves the others and skips those.
  bool mixed;
  // PagedAttentionQuantFp8: when set, every output element written is also quantized as
  // QuantFp8Static of its rounded value, with 1 / input_scale = out8_inv (StoreAttnOut).
  uint8_t* out8;
  float out8_inv;
};

// The number of work items (CTAs before splitting) a kernel with `unit` query vectors per
// CTA and per_row vectors per query row needs for T rows of S sequences; the numbering is
// AttnItemStart's (attention_seq.cuh).
inline int64_t AttnItems(int64_t T, int64_t S, int64_t per_row, int64_t unit) { return T * per_row / unit + S; }

// The decode kernel (attention_decode.cu): T == S (one query row per sequence), head size
// 64 or 128, up to 8 query heads per KV head, a BF16/F16 cache read by queries of its
// dtype or an F8E4M3 cache read by BF16/F16 queries, 16-byte aligned rows, at least 8
// sequences (one for the tensor-core kernel's steps); VT_CUDA_ATTN_DECODE=0 turns it off
// (A/B runs), =always on at any batch (tests). LaunchDecode runs it over the grid (S, Hk, a.num_splits), leaving split
// partials in a.part_ml / a.part_acc when a.num_splits > 1, combined in the launch when
// a.split_counters is set (attention_split.cuh), else by the caller as the general kernel's.
// BF16 queries over a BF16 or F8E4M3 cache take the tensor-core decode kernel
// (LaunchDecodeMma), the others the CUDA-core one.
bool DecodeKernelFits(const AttnArgs& a, DType query, DType cache);
void LaunchDecode(CudaQueue& cq, const AttnArgs& a, DType query, DType cache);
// The same conditions without T == S: whether the decode kernels can serve the one-row
// sequences of a mixed step (a.mixed).
bool DecodeKernelFitsMixed(const AttnArgs& a, DType query, DType cache);

// The tensor-core decode kernel (attention_decode_mma.cu) over the same grid and split
// partials: BF16 queries over a BF16 or F8E4M3 cache, head size 64 or 128, up to 8 query
// heads per KV head, 16-byte aligned rows; false (nothing launched) otherwise, when
// VT_CUDA_ATTN_DECODE_MMA=0, or for an F8E4M3 cache when VT_CUDA_ATTN_DECODE_MMA_FP8=0.
bool LaunchDecodeMma(CudaQueue& cq, const AttnArgs& a, DType query, DType cache);
// The wide form of the tensor-core decode kernel (attention_decode_mma.cu): kWideTeams
// teams of four warps in one CTA take a context's tiles side by side, the query heads as the
// rows of their products. DecodeMmaWide: whether a step LaunchDecodeMma takes runs in it, over
// a BF16 or an F8E4M3 cache (unless VT_CUDA_ATTN_DECODE_HEADS_N=1 asks for the query heads
// as the columns), when the step has at most a quarter as many (sequence, KV head) pairs as
// the GPU has SMs (batch 1-4 of 8 KV heads on 132 SMs);
// VT_CUDA_ATTN_DECODE_WIDE=0 never, =always at any batch (A/B runs, tests), read at each
// call; never where a CTA cannot opt in to its shared memory (104 KB at head size 128 over a
// BF16 cache: sm_80 and sm_90 can, sm_86 and sm_89 cannot). Its launches split contexts for
// at most one CTA per SM (attention.cu).
constexpr int kWideTeams = 3;
bool DecodeMmaWide(const CudaQueue& cq, const AttnArgs& a, DType query, DType cache);
// Whether the step's geometry and dtypes are the tensor-core decode kernel's over a BF16
// cache (as LaunchDecodeMma, but for the device's compute capability): such steps take a
// decode kernel from one sequence on, the others (F8E4M3 caches included) from 8.
bool DecodeMmaTakes(const AttnArgs& a, DType query, DType cache);
// The same over an F8E4M3 cache (BF16 queries; off with VT_CUDA_ATTN_DECODE_MMA_FP8=0): such
// decode steps (T == S) take it at any batch, mixed steps from 8 sequences.
bool DecodeMmaFp8Takes(const AttnArgs& a, DType query, DType cache);

// Tensor-core attention for steps with many query rows (prefill): BF16 queries over a BF16
// or F8E4M3 cache with head size 64 or 128 and 16-byte aligned rows (PrefillMmaFits), and
// at least 64 rows per sequence on average unless a.mixed; false (nothing launched)
// otherwise.
bool PrefillMmaFits(const CudaQueue& cq, const AttnArgs& a, DType query, DType cache);
bool LaunchPrefillMma(CudaQueue& cq, const AttnArgs& a, DType query, DType cache);

}  // namespace vt::cuda
