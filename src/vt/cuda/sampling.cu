// CUDA kernels of the sampling ops (vt/ops/sampling.h): one block per row. SampleTokens
// takes the cluster kernel (sample_tokens_cluster.cu) where it can, this one elsewhere.
//
// Selections without sorting: the k-th largest logit (top_k) and the top_p threshold p* are
// found by bisection over the order-preserving bit patterns of the values, each step a
// block-wide count or double sum. The draw walks the kept tokens in id order: each thread
// owns a contiguous chunk of ids, the chunks' double sums are scanned in order, and the
// first chunk whose own running sum passes u * total gives the token. The CPU uses the
// same formulas (exp in double rounded to f32, double sums), so the tokens agree except where rounding of a
// sum decides a boundary. Entries with ids outside the row are skipped (see sampling.h).
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "vt/cuda/context.h"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/cuda/sampling_common.cuh"
#include "vt/ops/sampling.h"

namespace vt::cuda {

namespace {

using namespace sampling;

__device__ float BlockMax(const float* x, int64_t V, float scale_div, Scratch& s) {
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) m = fmaxf(m, x[i] / scale_div);
  return BlockReduce(m, Max{}, s.f);
}

__global__ void TopKLogprobsKernel(const float* logits, int64_t V, const int32_t* targets, int K, int32_t* top_ids,
                                   float* top_logprobs, float* target_logprobs, int32_t* target_ranks) {
  __shared__ Scratch s;
  const int64_t r = blockIdx.x;
  const float* x = logits + r * V;
  const float m = BlockMax(x, V, 1.0f, s);
  double acc = 0;
  for (int64_t i = threadIdx.x; i < V; i += kThreads)
    acc += x[i] == m ? 1.0f : static_cast<float>(exp(static_cast<double>(x[i] - m)));
  const double log_s = log(BlockReduce(acc, Sum{}, s.d));
  auto logprob = [&](float v) {
    return v == m ? static_cast<float>(-log_s) : static_cast<float>((static_cast<double>(v) - m) - log_s);
  };
  const int32_t t = targets[r];
  const bool valid = t >= 0 && t < V;
  const float xt = valid ? x[t] : 0.0f;
  int better = 0;
  for (int64_t i = threadIdx.x; i < V; i += kThreads) better += x[i] > xt ? 1 : 0;
  better = BlockReduce(better, Sum{}, s.i);
  if (threadIdx.x == 0) {
    target_ranks[r] = valid ? 1 + better : 0;
    target_logprobs[r] = valid ? logprob(xt) : NAN;
  }
  // K rounds of argmax below the previous pick in the order (value desc, id asc).
  unsigned long long prev = ~0ull;
  for (int j = 0; j < K; ++j) {
    unsigned long long best = 0;
    for (int64_t i = threadIdx.x; i < V; i += kThreads) {
      const unsigned long long k = ArgKey(x[i], i);
      if (k < prev && k > best) best = k;
    }
    best = BlockReduce(best, MaxU64{}, s.u);
    prev = best;
    if (threadIdx.x == 0) {
      const int id = ArgKeyId(best);
      top_ids[r * K + j] = id;
      top_logprobs[r * K + j] = logprob(x[id]);
    }
  }
}

// [begin, end) of row r's entries, clamped to the n entries given.
__device__ __forceinline__ void RowRange(const int32_t* offsets, int64_t r, int64_t n, int64_t* b, int64_t* e) {
  const int64_t lo = offsets[r], hi = offsets[r + 1];
  *b = lo < 0 ? 0 : (lo > n ? n : lo);
  *e = hi < *b ? *b : (hi > n ? n : hi);
}

__global__ void LogitsMaskKernel(float* logits, int64_t V, const int32_t* ao, const int32_t* allowed, int64_t na,
                                 const int32_t* bo, const int32_t* banned, int64_t nb) {
  const int64_t r = blockIdx.x;
  float* x = logits + r * V;
  int64_t b, e;
  RowRange(ao, r, na, &b, &e);
  if (e > b) {
    for (int64_t i = threadIdx.x; i < V; i += kThreads) {
      int64_t lo = b, hi = e;  // binary search of i in the ascending allowed ids
      while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (allowed[mid] < i)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo == e || allowed[lo] != i) x[i] = -INFINITY;
    }
  }
  RowRange(bo, r, nb, &b, &e);
  for (int64_t j = b + threadIdx.x; j < e; j += kThreads) {
    const int32_t id = banned[j];
    if (id >= 0 && id < V) x[id] = -INFINITY;
  }
}

__global__ void LogitsAddSparseKernel(float* logits, int64_t V, const int32_t* offsets, const int32_t* ids,
                                      const float* values, int64_t n) {
  const int64_t r = blockIdx.x;
  int64_t b, e;
  RowRange(offsets, r, n, &b, &e);
  for (int64_t j = b + threadIdx.x; j < e; j += kThreads) {
    const int32_t id = ids[j];
    if (id >= 0 && id < V) atomicAdd(&logits[r * V + id], values[j]);
  }
}

__global__ void LogitsPenaltiesKernel(float* logits, int64_t V, const int32_t* offsets, const int32_t* ids,
                                      const int32_t* counts, int64_t n, const float* penalties) {
  const int64_t r = blockIdx.x;
  const float rp = penalties[3 * r], f = penalties[3 * r + 1], p = penalties[3 * r + 2];
  int64_t b, e;
  RowRange(offsets, r, n, &b, &e);
  for (int64_t j = b + threadIdx.x; j < e; j += kThreads) {
    const int32_t id = ids[j];
    if (id < 0 || id >= V) continue;
    float v = logits[r * V + id];
    v = v > 0 ? v / rp : v * rp;
    v -= f * static_cast<float>(counts[j]);
    if (counts[j] > 0) v -= p;
    logits[r * V + id] = v;
  }
}

// Greedy rows, first pass: block p of row r reduces ids [p * kArgmaxPart, (p+1) *
// kArgmaxPart) to its best (value, id) key, so a 152k vocabulary is read by ~75 blocks
// instead of one; SampleTokensKernel takes the max of a row's keys. The max of the keys is
// the same whichever blocks found them, so the token equals the one-block argmax's.
constexpr int kArgmaxThreads = 256;
constexpr int64_t kArgmaxPart = 2048;

__global__ void __launch_bounds__(kArgmaxThreads)
    ArgmaxPartsKernel(unsigned long long* parts, const float* logits, int64_t V, const float* params) {
  PdlWait();
  const int64_t r = blockIdx.y;
  if (params[3 * r] >= kGreedyTemperature) return;  // a sampled row: SampleTokensKernel reads it whole
  const float* x = logits + r * V;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * kArgmaxPart;
  const int64_t e = b + kArgmaxPart < V ? b + kArgmaxPart : V;
  unsigned long long best = 0;
#pragma unroll 8
  for (int64_t i = b + threadIdx.x; i < e; i += kArgmaxThreads) best = MaxU64{}(best, ArgKey(x[i], i));
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) best = MaxU64{}(best, __shfl_xor_sync(0xFFFFFFFFu, best, off));
  __shared__ unsigned long long warp_best[kArgmaxThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_best[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) best = MaxU64{}(best, warp_best[w]);
    parts[r * gridDim.x + blockIdx.x] = best;
  }
}

__global__ void SampleTokensKernel(int32_t* out, const float* logits, int64_t V, const float* params,
                                   const int32_t* top_k, const int64_t* random_bits,
                                   const unsigned long long* argmax_parts, int num_parts) {
  PdlWait();
  __shared__ Scratch s;
  __shared__ double chunk_start[kThreads + 1];
  const int64_t r = blockIdx.x;
  const float* x = logits + r * V;
  const float temperature = params[3 * r], top_p = params[3 * r + 1], min_p = params[3 * r + 2];
  if (temperature < kGreedyTemperature) {
    GreedyFromParts(out, r, argmax_parts, num_parts, s.u);
    return;
  }
  const float m = BlockMax(x, V, temperature, s);
  auto prob = [&](int64_t i) {
    const float xs = x[i] / temperature;
    return xs == m ? 1.0f : static_cast<float>(exp(static_cast<double>(xs - m)));
  };
  // top_k: the largest key t with at least k keys >= t is the k-th largest value's key.
  const int32_t k = top_k[r];
  const bool use_k = k > 0 && k < V;
  uint32_t kth = 0;
  if (use_k) {
    uint64_t lo = 0, hi = 0xFFFFFFFFull;
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo + 1) / 2;
      int n = 0;
      for (int64_t i = threadIdx.x; i < V; i += kThreads) n += OrderKey(x[i] / temperature) >= mid ? 1 : 0;
      n = BlockReduce(n, Sum{}, s.i);
      if (n >= k)
        lo = mid;
      else
        hi = mid - 1;
    }
    kth = static_cast<uint32_t>(lo);
  }
  auto kept_by_k = [&](int64_t i, float p) { return p >= min_p && (!use_k || OrderKey(x[i] / temperature) >= kth); };
  // top_p: the largest p* (as bits; p >= 0, so bit order is value order) whose tokens
  // with p >= p* hold at least top_p of the mass left by min_p and top_k.
  uint32_t p_star = 0;
  if (top_p < 1.0f) {
    double total = 0;
    for (int64_t i = threadIdx.x; i < V; i += kThreads) {
      const float p = prob(i);
      if (kept_by_k(i, p)) total += p;
    }
    const double need = static_cast<double>(top_p) * BlockReduce(total, Sum{}, s.d);
    uint32_t lo = 0, hi = 0x3F800000u;  // p <= 1
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      double mass = 0;
      for (int64_t i = threadIdx.x; i < V; i += kThreads) {
        const float p = prob(i);
        if (kept_by_k(i, p) && __float_as_uint(p) >= mid) mass += p;
      }
      if (BlockReduce(mass, Sum{}, s.d) >= need)
        lo = mid;
      else
        hi = mid - 1;
    }
    p_star = lo;
  }
  auto kept = [&](int64_t i, float p) { return kept_by_k(i, p) && __float_as_uint(p) >= p_star; };
  // The draw over contiguous chunks of ids, scanned in order.
  const int64_t chunk = (V + kThreads - 1) / kThreads;
  const int64_t b = threadIdx.x * chunk, e = b + chunk < V ? b + chunk : V;
  double local = 0;
  int last = -1;
  for (int64_t i = b; i < e; ++i) {
    const float p = prob(i);
    if (kept(i, p)) local += p, last = static_cast<int>(i);
  }
  ScanChunkSums(local, chunk_start);
  const double target = SampleUniform(static_cast<uint64_t>(random_bits[r])) * chunk_start[kThreads];
  int pick = INT_MAX;
  if (local > 0) {
    double cum = chunk_start[threadIdx.x];
    for (int64_t i = b; i < e && pick == INT_MAX; ++i) {
      const float p = prob(i);
      if (!kept(i, p)) continue;
      cum += p;
      if (cum > target) pick = static_cast<int>(i);
    }
  }
  pick = BlockReduce(pick, Min{}, s.i);
  last = BlockReduce(last, MaxInt{}, s.i);
  if (threadIdx.x == 0) out[r] = pick != INT_MAX ? pick : (last >= 0 ? last : 0);
}

unsigned Rows(const Tensor& logits) { return static_cast<unsigned>(logits.dim(0)); }

void TopKLogprobsCuda(const Queue& q, const Tensor& logits, const Tensor& targets, const Tensor& top_ids,
                      const Tensor& top_logprobs, const Tensor& target_logprobs, const Tensor& target_ranks) {
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  TopKLogprobsKernel<<<Rows(logits), kThreads, 0, cq.stream>>>(
      logits.data_as<float>(), logits.dim(1), targets.data_as<int32_t>(), static_cast<int>(top_ids.dim(1)),
      top_ids.data_as<int32_t>(), top_logprobs.data_as<float>(), target_logprobs.data_as<float>(),
      target_ranks.data_as<int32_t>());
  VT_CUDA_CHECK_LAUNCH("TopKLogprobsKernel");
}

void LogitsMaskCuda(const Queue& q, const Tensor& logits, const Tensor& allowed_offsets, const Tensor& allowed_ids,
                    const Tensor& banned_offsets, const Tensor& banned_ids) {
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  LogitsMaskKernel<<<Rows(logits), kThreads, 0, cq.stream>>>(
      logits.data_as<float>(), logits.dim(1), allowed_offsets.data_as<int32_t>(), allowed_ids.data_as<int32_t>(),
      allowed_ids.dim(0), banned_offsets.data_as<int32_t>(), banned_ids.data_as<int32_t>(), banned_ids.dim(0));
  VT_CUDA_CHECK_LAUNCH("LogitsMaskKernel");
}

void LogitsAddSparseCuda(const Queue& q, const Tensor& logits, const Tensor& offsets, const Tensor& ids,
                         const Tensor& values) {
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  LogitsAddSparseKernel<<<Rows(logits), kThreads, 0, cq.stream>>>(logits.data_as<float>(), logits.dim(1),
                                                                  offsets.data_as<int32_t>(), ids.data_as<int32_t>(),
                                                                  values.data_as<float>(), ids.dim(0));
  VT_CUDA_CHECK_LAUNCH("LogitsAddSparseKernel");
}

void LogitsPenaltiesCuda(const Queue& q, const Tensor& logits, const Tensor& offsets, const Tensor& ids,
                         const Tensor& counts, const Tensor& penalties) {
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  LogitsPenaltiesKernel<<<Rows(logits), kThreads, 0, cq.stream>>>(
      logits.data_as<float>(), logits.dim(1), offsets.data_as<int32_t>(), ids.data_as<int32_t>(),
      counts.data_as<int32_t>(), ids.dim(0), penalties.data_as<float>());
  VT_CUDA_CHECK_LAUNCH("LogitsPenaltiesKernel");
}

void SampleTokensCuda(const Queue& q, const Tensor& out_ids, const Tensor& logits, const Tensor& params,
                      const Tensor& top_k, const Tensor& random_bits) {
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  const int64_t R = logits.dim(0), V = logits.dim(1);
  if (R == 0) return;
  const int64_t num_parts = (V + kArgmaxPart - 1) / kArgmaxPart;
  VT_CHECK(num_parts <= kThreads && R <= 65535, "SampleTokens on cuda: ", R, " rows of ", V,
           " logits exceed the greedy pass's ", kThreads * kArgmaxPart, " ids or 65535 rows");
  const Tensor parts = Tensor::Empty({R, num_parts}, DType::kI64, logits.device());
  LaunchOverlapped(cq, "ArgmaxPartsKernel", ArgmaxPartsKernel,
                   dim3(static_cast<unsigned>(num_parts), static_cast<unsigned>(R)), kArgmaxThreads, 0,
                   static_cast<unsigned long long*>(parts.data()), logits.data_as<float>(), V,
                   params.data_as<float>());
  if (LaunchSampleTokensCluster(cq, out_ids.data_as<int32_t>(), logits.data_as<float>(), R, V, params.data_as<float>(),
                                top_k.data_as<int32_t>(), random_bits.data_as<int64_t>(),
                                static_cast<const unsigned long long*>(parts.data()), static_cast<int>(num_parts)))
    return;
  LaunchOverlapped(cq, "SampleTokensKernel", SampleTokensKernel, Rows(logits), kThreads, 0, out_ids.data_as<int32_t>(),
                   logits.data_as<float>(), V, params.data_as<float>(), top_k.data_as<int32_t>(),
                   random_bits.data_as<int64_t>(), static_cast<const unsigned long long*>(parts.data()),
                   static_cast<int>(num_parts));
}

}  // namespace

void RegisterSamplingKernels() {
  Register<OpId::kTopKLogprobs>(DeviceType::kCUDA, &TopKLogprobsCuda);
  Register<OpId::kLogitsMask>(DeviceType::kCUDA, &LogitsMaskCuda);
  Register<OpId::kLogitsAddSparse>(DeviceType::kCUDA, &LogitsAddSparseCuda);
  Register<OpId::kLogitsPenalties>(DeviceType::kCUDA, &LogitsPenaltiesCuda);
  Register<OpId::kSampleTokens>(DeviceType::kCUDA, &SampleTokensCuda);
}

}  // namespace vt::cuda
