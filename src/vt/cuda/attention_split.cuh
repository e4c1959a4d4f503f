// Internal to the CUDA decode attention kernels: the splits of a sequence's context
// (flash-decoding) combined by the last of its CTAs to finish, in the same launch, instead
// of by AttnCombineKernel after it (one kernel fewer a layer, which a batch-1 decode step
// feels: it is latency-bound).
//
// Every CTA of (sequence s, KV head kh) arrives at the end, whatever it did before (also
// one that skipped its rows because of bad metadata, so that the count always completes):
// it makes its partials visible device-wide, then adds one to counter [s * Hk + kh]. The CTA
// that sees num_splits - 1 resets the counter to zero for the next launch and combines, for
// each query row of the sequence and each of the group's heads, the splits' (max, sum,
// accumulator) triples in split order with exactly AttnCombineKernel's arithmetic, so the
// output bytes do not depend on which CTA finished last, nor on which of the two combines
// ran.
#pragma once

#include <cstdint>

#include "vt/cuda/attention.h"
#include "vt/cuda/attention_seq.cuh"

namespace vt::cuda {

// Call with every thread of every CTA of a decode launch over the grid (S, Hk, num_splits),
// after the CTA's partials are written. OutTag: the output's dtype tag (Bf16, F16).
template <typename OutTag>
__device__ void CombineSplitsInLastCta(const AttnArgs& a) {
  if (a.num_splits <= 1 || a.split_counters == nullptr) return;  // uniform
  __shared__ int last;
  const int64_t s = blockIdx.x, kh = blockIdx.y;
  __threadfence();  // this CTA's partials before its arrival
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t* counter = a.split_counters + s * a.Hk + kh;
    last = atomicAdd(counter, 1) == static_cast<int32_t>(a.num_splits - 1);
    if (last) *counter = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other CTAs' partials, seen after their arrivals
  AttnSeq seq;
  if (!ReadAttnSeq(a, s, false, seq)) return;  // reported by the split CTAs
  if (a.mixed && seq.n != 1) return;           // a mixed step's other rows are the prefill kernel's
  const int64_t g = a.group, D = a.D, units = a.T * a.Hq;
  for (int64_t r = 0; r < seq.n; ++r)
    for (int64_t e = threadIdx.x; e < g * D; e += blockDim.x) {
      const int64_t h = e / D, d = e - h * D;
      const int64_t u = (seq.q0 + r) * a.Hq + kh * g + h;
      float M = -INFINITY;
      for (int64_t p = 0; p < a.num_splits; ++p) M = fmaxf(M, __ldcg(a.part_ml + 2 * (p * units + u)));
      float L = 0.0f, o = 0.0f;
      for (int64_t p = 0; p < a.num_splits; ++p) {
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
