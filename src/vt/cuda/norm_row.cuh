// The RMS inverse of one row as the CTA-per-row kernels compute it (norm.cu,
// fused_group_quant.cu): warp 0 forms the canonical sum of squares (lane j: the fma chain
// of elements j, j+32, ... in order, its loads issued 8 at a time; then WarpCanonicalSum),
// so the result, and every byte derived from it, equals the CPU kernel's.
#pragma once

#include "vt/cuda/device_util.cuh"

namespace vt::cuda {

// get(i): element i of the row after any residual add (shared or global memory written by
// this CTA before the call). Every thread of the CTA gets the inverse; call from all.
template <typename Get>
__device__ __forceinline__ float RowRmsInverse(const Get& get, int64_t H, float eps, float* inv_shared) {
  __syncthreads();  // the row is complete
  if (threadIdx.x < 32) {
    float acc = 0.0f;
    int64_t i = threadIdx.x;
    for (; i + 7 * 32 < H; i += 8 * 32) {
      float s[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) s[k] = get(i + 32 * k);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc = numerics::Fma(s[k], s[k], acc);
    }
    for (; i < H; i += 32) {
      const float s = get(i);
      acc = numerics::Fma(s, s, acc);
    }
    const float inv = numerics::RmsInverse(WarpCanonicalSum(acc), H, eps);
    if (threadIdx.x == 0) *inv_shared = inv;
  }
  __syncthreads();
  return *inv_shared;
}

}  // namespace vt::cuda
