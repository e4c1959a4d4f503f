// Block-level helpers of the CUDA sampling kernels (sampling.cu, sample_tokens_cluster.cu):
// the fixed-order block reduction and the order-preserving keys of f32 values.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "vt/cuda/context.h"

namespace vt::cuda {

// SampleTokens' sampled rows over thread-block clusters (sample_tokens_cluster.cu), greedy
// rows from ArgmaxPartsKernel's keys: false (nothing launched) when the device is older than
// sm_90, the row's slices do not fit a cluster's shared memory, or VT_CUDA_SAMPLE_CLUSTER=0.
bool LaunchSampleTokensCluster(CudaQueue& cq, int32_t* out, const float* logits, int64_t R, int64_t V,
                               const float* params, const int32_t* top_k, const int64_t* random_bits,
                               const unsigned long long* argmax_parts, int num_parts);

namespace sampling {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

// Shared scratch of the block reductions (one slot per warp).
struct Scratch {
  double d[kWarps];
  float f[kWarps];
  int i[kWarps];
  unsigned long long u[kWarps];
};

// Reduces v over the block with op; every thread gets the result, combined in the same
// order on every thread (warps in index order).
template <typename T, typename Op>
__device__ T BlockReduce(T v, Op op, T* slots) {
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  __syncthreads();  // the slots may still be read by the previous reduction
  if ((threadIdx.x & 31) == 0) slots[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = slots[0];
  for (int w = 1; w < kWarps; ++w) r = op(r, slots[w]);
  return r;
}

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Min {
  __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};
struct MaxInt {
  __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};

// (value, id) packed so that a larger key is a larger value, then a lower id.
__device__ __forceinline__ uint32_t OrderKey(float f) {
  if (f != f) return 0;     // NaN ranks below everything
  if (f == 0.0f) f = 0.0f;  // -0 and +0 compare equal
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ unsigned long long ArgKey(float v, int64_t i) {
  return (static_cast<unsigned long long>(OrderKey(v)) << 32) | (0xFFFFFFFFull - static_cast<unsigned long long>(i));
}
struct MaxU64 {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const { return a > b ? a : b; }
};
__device__ __forceinline__ int ArgKeyId(unsigned long long k) {
  return static_cast<int>(0xFFFFFFFFull - (k & 0xFFFFFFFFull));
}

// A greedy row's token from ArgmaxPartsKernel's num_parts keys of row r (each block of
// kThreads threads; thread 0 writes out[r]): NaN ignored, an all -inf row gives 0.
__device__ __forceinline__ void GreedyFromParts(int32_t* out, int64_t r, const unsigned long long* argmax_parts,
                                                int num_parts, unsigned long long* slots) {
  unsigned long long best = threadIdx.x < num_parts ? argmax_parts[r * num_parts + threadIdx.x] : 0;
  best = BlockReduce(best, MaxU64{}, slots);
  if (threadIdx.x == 0) out[r] = best == 0 ? 0 : ArgKeyId(best);
}

// The draw's scan: chunk_start[t] becomes the sum of the chunks of threads before t (in
// thread order), chunk_start[kThreads] the block's total; every thread may read them after.
__device__ __forceinline__ void ScanChunkSums(double local, double* chunk_start) {
  chunk_start[threadIdx.x] = local;
  __syncthreads();
  if (threadIdx.x == 0) {
    double run = 0;
    for (int t = 0; t < kThreads; ++t) {
      const double c = chunk_start[t];
      chunk_start[t] = run;
      run += c;
    }
    chunk_start[kThreads] = run;
  }
  __syncthreads();
}

}  // namespace sampling

}  // namespace vt::cuda
