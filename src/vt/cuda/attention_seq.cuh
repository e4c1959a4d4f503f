// Internal to the CUDA PagedAttention kernels: one sequence's metadata, checked the same way
// by the decode (attention.cu) and the tensor-core prefill (attention_prefill.cu) kernels.
#pragma once

#include <cstdint>

#include "vt/cuda/attention.h"
#include "vt/cuda/device_error.cuh"

namespace vt::cuda {

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

}  // namespace vt::cuda
