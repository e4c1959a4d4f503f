// What the Gated DeltaNet kernels of gdn.cu (the conv, the token-by-token delta rule) and
// gdn_chunked.cu (the chunked delta rule of long sequences) share: the per-sequence
// metadata read, the op's arguments, and the launcher of the chunked kernel.
#pragma once

#include <cstdint>

#include "vt/cuda/context.h"
#include "vt/cuda/device_error.cuh"
#include "vt/dtype.h"

namespace vt::cuda::gdn {

// Sequence s's token range and state slot; ReadGdnSeq records what is inconsistent (thread
// with `report` set). range_ok is false when the sequence is skipped; a padding row (slot
// -1) with a valid range has range_ok set, and the caller zeroes its outputs.
struct GdnSeq {
  int64_t t0, t1;
  int32_t slot;
  bool range_ok;
};

__device__ __forceinline__ GdnSeq ReadGdnSeq(const int32_t* qs, const int32_t* slots, int64_t s, int64_t S,
                                             int64_t T, int64_t num_slots, bool report, IndexErrorRecord* err) {
  GdnSeq q;
  q.t0 = qs[s];
  q.t1 = qs[s + 1];
  q.slot = slots[s];
  if (report) {
    if (s == 0 && q.t0 != 0) RecordIndexError(err, IndexError::kGdnQueryStart, 0, q.t0, T);
    if (s == S - 1 && q.t1 != T) RecordIndexError(err, IndexError::kGdnQueryStart, S, q.t1, T);
    if (q.t1 < q.t0) RecordIndexError(err, IndexError::kGdnQueryStart, s + 1, q.t1, T, q.t0);
    if (q.slot < -1 || q.slot >= num_slots) RecordIndexError(err, IndexError::kGdnStateSlot, s, q.slot, num_slots);
  }
  q.range_ok = q.t0 >= 0 && q.t0 <= q.t1 && q.t1 <= T;
  if (q.slot < -1 || q.slot >= num_slots) q.range_ok = false;
  return q;
}

__device__ __forceinline__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

struct GdnArgs {
  void* out;
  const void *query, *key, *value, *a, *b, *A_log, *dt_bias;
  DType qd, kd, vd, ad, bd, Ad, dtd, od;
  float* state;
  const int32_t *qs, *slots;
  int64_t S, T, nk, nv, dk, dv, num_slots;
  IndexErrorRecord* err;
  // Sequences of at least this many tokens belong to the chunked kernel, the others to the
  // token-by-token one (both launched over every sequence; each skips the other's).
  int64_t chunked_min;
};

// The chunked kernel's shape: dk = 128, kChunkCols columns of the state per CTA, chunks of
// kChunkTokens tokens; sequences of kChunkedMinTokens or more take it in a step with T > S.
constexpr int64_t kChunkDk = 128, kChunkCols = 32, kChunkTokens = 64, kChunkedMinTokens = 32;

// Launches the chunked delta rule over g's sequences of g.chunked_min tokens or more
// (requires dk == kChunkDk, dv % kChunkCols == 0, q/k/v/a/b all BF16 or all F32).
void LaunchGatedDeltaRuleChunked(CudaQueue& cq, const GdnArgs& g);

}  // namespace vt::cuda::gdn
