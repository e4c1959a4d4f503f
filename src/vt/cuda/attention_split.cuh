// Internal to the CUDA decode attention kernels: the splits of a sequence's context
// (flash-decoding) combined by the last of its CTAs to finish, in the same launch, instead
// of by AttnCombineKernel after it (one kernel fewer a layer, which a batch-1 decode step
// feels: it is latency-bound).
//
// Split p of a context of ctx tokens covers tokens [p·chunk, (p + 1)·chunk), chunk =
// ceil(ctx / num_splits) rounded up to whole spans of the kernel's tile (a context of at
// most a.one_split_tokens: the whole context), so the splits from ceil(ctx / chunk) on hold
// no token. A CUDA graph sizes num_splits for the widest block table
// (max_model_len), so a short context leaves most splits empty: with the combine below
// their CTAs return at once, write nothing and do not arrive. When one split holds the
// whole context, its CTA writes the output itself (OneSplitHoldsAll), with the combine's
// arithmetic, and nothing arrives.
//
// Every other CTA of (sequence s, KV head kh) arrives at the end, whatever it did before
// (also one that skipped its rows because of bad metadata, so that the count always
// completes; then every split arrives): it makes its partials visible device-wide, then adds
// one to counter [s * Hk + kh]. The CTA that sees the last arrival resets the counter to zero
// for the next launch and combines, for each query row of the sequence and each of the
// group's heads, the splits' (max, sum, accumulator) triples in split order with exactly
// AttnCombineKernel's arithmetic (an empty split's (-inf, 0, 0) changes none of its sums),
// so the output bytes do not depend on which CTA finished last, nor on which of the two
// combines ran.
#pragma once

#include <cstdint>

#include "vt/cuda/attention.h"
#include "vt/cuda/attention_seq.cuh"

namespace vt::cuda {

// The tokens of each split of a decode kernel's context of ctx tokens: SplitChunk, or, when
// empty splits are skipped and ctx <= a.one_split_tokens, the whole context in whole spans.
__device__ __forceinline__ int64_t DecodeSplitChunk(const AttnArgs& a, int64_t ctx, int64_t span) {
  if (a.skip_empty_splits && ctx <= a.one_split_tokens) return max((ctx + span - 1) / span * span, span);
  return SplitChunk(ctx, a.num_splits, span);
}

// The splits that hold tokens of a context of ctx tokens (all of them for an empty context).
__device__ __forceinline__ int64_t SplitsHoldingTokens(const AttnArgs& a, int64_t ctx, int64_t span) {
  if (ctx <= 0) return a.num_splits;
  const int64_t chunk = DecodeSplitChunk(a, ctx, span);
  return min(a.num_splits, (ctx + chunk - 1) / chunk);
}

// Whether this CTA's split is an empty one that the combine in the launch skips (it writes
// no partial); uniform across the CTA.
__device__ __forceinline__ bool SkippedEmptySplit(const AttnArgs& a, int64_t ctx, int64_t split, int64_t span) {
  return a.skip_empty_splits && split >= SplitsHoldingTokens(a, ctx, span);
}

// Whether split 0 holds the whole (non-empty) context of a split launch whose empty splits
// are skipped: its CTA then writes the output (OneSplitOut) instead of partials, and
// CombineSplitsInLastCta does nothing. Uniform across the CTA.
__device__ __forceinline__ bool OneSplitHoldsAll(const AttnArgs& a, int64_t ctx, int64_t span) {
  return a.num_splits > 1 && a.skip_empty_splits && ctx > 0 && SplitsHoldingTokens(a, ctx, span) == 1;
}

// The output of a context held by one split from its unnormalised sum o (v_scale applied)
// and its softmax sum l: the combine's arithmetic over one arrival (weight e^0 = 1, the sums
// started at 0), so the bytes equal those of the partial combined by the last CTA.
__device__ __forceinline__ float OneSplitOut(float o, float l) {
  const float acc = 0.0f + o;
  return acc * (1.0f / l);
}

// Call with every thread of every CTA of a decode launch over the grid (S, Hk, num_splits),
// after the CTA's partials are written. OutTag: the output's dtype tag (Bf16, F16); span:
// the kernel's split granularity in tokens.
template <typename OutTag>
__device__ void CombineSplitsInLastCta(const AttnArgs& a, int64_t span) {
  if (a.num_splits <= 1 || a.split_counters == nullptr) return;  // uniform
  __shared__ int last;
  const int64_t s = blockIdx.x, kh = blockIdx.y;
  AttnSeq seq;
  const bool seq_ok = ReadAttnSeq(a, s, false, seq);  // bad metadata is reported by the split CTAs
  const int64_t arrivals = seq_ok && a.skip_empty_splits ? SplitsHoldingTokens(a, seq.ctx, span) : a.num_splits;
  if (static_cast<int64_t>(blockIdx.z) >= arrivals) return;  // an empty split (SkippedEmptySplit)
  if (seq_ok && OneSplitHoldsAll(a, seq.ctx, span)) return;   // its CTA wrote the output
  __threadfence();  // this CTA's partials before its arrival
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* counter = a.split_counters + s * a.Hk + kh;
    last = atomicAdd(counter, 1) == static_cast<int32_t>(arrivals - 1);
    if (last) *counter = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other CTAs' partials, seen after their arrivals
  if (!seq_ok) return;
  if (a.mixed && seq.n != 1) return;           // a mixed step's other rows are the prefill kernel's
  const int64_t g = a.group, D = a.D, units = a.T * a.Hq;
  for (int64_t r = 0; r < seq.n; ++r)
    for (int64_t e = threadIdx.x; e < g * D; e += blockDim.x) {
      const int64_t h = e / D, d = e - h * D;
      const int64_t u = (seq.q0 + r) * a.Hq + kh * g + h;
      float M = -INFINITY;
      for (int64_t p = 0; p < arrivals; ++p) M = fmaxf(M, __ldcg(a.part_ml + 2 * (p * units + u)));
      float L = 0.0f, o = 0.0f;
      for (int64_t p = 0; p < arrivals; ++p) {
        const int64_t at = p * units + u;
        const float mp = __ldcg(a.part_ml + 2 * at);
        const float w = mp == -INFINITY ? 0.0f : expf(mp - M);
        L += __ldcg(a.part_ml + 2 * at + 1) * w;
        o += __ldcg(a.part_acc + at * D + d) * w;
      }
      const float inv = 1.0f / L;
      StoreAttnOut<OutTag>(a, u * D + d, o * inv);
    }
}

}  // namespace vt::cuda
