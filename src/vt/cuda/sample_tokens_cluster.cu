// SampleTokens over a thread-block cluster (sm_90): the sampled rows of a step, each row's
// vocabulary split across the kCl CTAs of one cluster.
//
// The single-CTA kernel (sampling.cu) walks a whole row on one SM several times, with a
// double exp per token per walk: for a 152k vocabulary that is a few hundred microseconds
// per step without filters and milliseconds with top_p, whose bisection recomputes every
// probability at each of its steps. Here each CTA keeps its slice of x = logit / T and of
// p = f32(exp(double(x - m))) in shared memory, computed once, and every block-wide count
// or sum of the single-CTA kernel becomes a cluster-wide one: each CTA reduces its slice,
// publishes the result in its shared memory, and after one cluster barrier every thread
// of every CTA combines the kCl results in rank order, so all CTAs hold the same value and
// take the same branches. The selections are the same bisections over the same keys and
// bit patterns, the draw the same ordered walk (per-thread chunks of a CTA's slice, chunk
// sums scanned in order, then the CTAs' totals in rank order), so the tokens agree with the
// CPU's and the single-CTA kernel's except where rounding of a double sum decides a
// boundary. Greedy rows take the first pass's argmax keys (ArgmaxPartsKernel) in CTA 0.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "vt/cuda/context.h"
#include "vt/cuda/device_util.cuh"
#include "vt/cuda/kernels.h"
#include "vt/cuda/sampling_common.cuh"
#include "vt/ops/sampling.h"

namespace vt::cuda {

namespace {

namespace cg = cooperative_groups;
using namespace sampling;

std::atomic<int64_t> g_cluster_launches{0};

// Dynamic shared memory per CTA: x and p of its slice (floats), within the 227 KiB a CTA
// may take on sm_90 less the static scratch.
constexpr int64_t kSliceSmemBudget = int64_t{220} << 10;

// Per-CTA results published for the cluster, double-buffered by the reduction's parity: a
// CTA rewrites a parity's slot only after the next barrier, which every CTA passes only
// once it has read the slot.
struct Published {
  double d[2];
  float f[2];
  int i[2];
  unsigned long long u[2];
};

template <int kCl>
struct ClusterReducer {
  cg::cluster_group cl;
  Scratch* s;
  Published* pub;
  int parity = 0;

  template <typename T, typename Op>
  __device__ T Reduce(T v, Op op, T* block_slots, T (&published)[2]) {
    v = BlockReduce(v, op, block_slots);
    if (threadIdx.x == 0) published[parity] = v;
    cl.sync();
    T parts[kCl];
#pragma unroll
    for (int c = 0; c < kCl; ++c) parts[c] = *cl.map_shared_rank(&published[parity], c);
    T r = parts[0];
#pragma unroll
    for (int c = 1; c < kCl; ++c) r = op(r, parts[c]);
    parity ^= 1;
    return r;
  }
  __device__ double Sum(double v) { return Reduce(v, sampling::Sum{}, s->d, pub->d); }
  __device__ int Count(int v) { return Reduce(v, sampling::Sum{}, s->i, pub->i); }
  __device__ float MaxOf(float v) { return Reduce(v, Max{}, s->f, pub->f); }
  __device__ int MinOf(int v) { return Reduce(v, Min{}, s->i, pub->i); }
  __device__ int MaxIntOf(int v) { return Reduce(v, MaxInt{}, s->i, pub->i); }
};

// grid (kCl, R), cluster (kCl, 1, 1), kThreads threads; dynamic shared memory: 2 * slice floats.
template <int kCl>
__global__ void __launch_bounds__(kThreads) SampleTokensClusterKernel(int32_t* out, const float* logits, int64_t V,
                                                                      const float* params, const int32_t* top_k,
                                                                      const int64_t* random_bits,
                                                                      const unsigned long long* argmax_parts,
                                                                      int num_parts) {
  PdlWait();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ Scratch s;
  __shared__ Published pub;
  __shared__ double chunk_start[kThreads + 1];
  extern __shared__ float slice_smem[];
  cg::cluster_group cl = cg::this_cluster();
  const int rank = static_cast<int>(cl.block_rank());
  const int64_t r = blockIdx.y;
  const float temperature = params[3 * r], top_p = params[3 * r + 1], min_p = params[3 * r + 2];
  if (temperature < kGreedyTemperature) {  // the same for the whole cluster: no barrier is reached
    if (rank != 0) return;
    unsigned long long best = threadIdx.x < num_parts ? argmax_parts[r * num_parts + threadIdx.x] : 0;
    best = BlockReduce(best, MaxU64{}, s.u);
    if (threadIdx.x == 0) out[r] = best == 0 ? 0 : ArgKeyId(best);  // NaN ignored, an all -inf row gives 0
    return;
  }
  ClusterReducer<kCl> red{cl, &s, &pub};
  const int64_t slice = (V + kCl - 1) / kCl, b = rank * slice;
  const int64_t n = b >= V ? 0 : (V - b < slice ? V - b : slice);
  float* xs = slice_smem;
  float* p = slice_smem + slice;
  const float* x = logits + r * V + b;
  // Each thread fills and rereads its own entries (i = threadIdx.x + j * kThreads) until the draw.
  float m_local = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) m_local = fmaxf(m_local, xs[i] = x[i] / temperature);
  const float m = red.MaxOf(m_local);
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    p[i] = xs[i] == m ? 1.0f : static_cast<float>(exp(static_cast<double>(xs[i] - m)));
  // top_k: the largest key t with at least k keys >= t is the k-th largest value's key.
  const int32_t k = top_k[r];
  const bool use_k = k > 0 && k < V;
  uint32_t kth = 0;
  if (use_k) {
    uint64_t lo = 0, hi = OrderKey(m);  // no key exceeds the max's
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo + 1) / 2;
      int c = 0;
      for (int64_t i = threadIdx.x; i < n; i += kThreads) c += OrderKey(xs[i]) >= mid ? 1 : 0;
      if (red.Count(c) >= k)
        lo = mid;
      else
        hi = mid - 1;
    }
    kth = static_cast<uint32_t>(lo);
  }
  auto kept_by_k = [&](int64_t i) { return p[i] >= min_p && (!use_k || OrderKey(xs[i]) >= kth); };
  // top_p: the largest p* (as bits; p >= 0, so bit order is value order) whose tokens with
  // p >= p* hold at least top_p of the mass left by min_p and top_k.
  uint32_t p_star = 0;
  if (top_p < 1.0f) {
    double total = 0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads)
      if (kept_by_k(i)) total += p[i];
    const double need = static_cast<double>(top_p) * red.Sum(total);
    uint32_t lo = 0, hi = 0x3F800000u;  // p <= 1
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo + 1) / 2;
      double mass = 0;
      for (int64_t i = threadIdx.x; i < n; i += kThreads)
        if (kept_by_k(i) && __float_as_uint(p[i]) >= mid) mass += p[i];
      if (red.Sum(mass) >= need)
        lo = mid;
      else
        hi = mid - 1;
    }
    p_star = lo;
  }
  auto kept = [&](int64_t i) { return kept_by_k(i) && __float_as_uint(p[i]) >= p_star; };
  __syncthreads();  // the draw reads other threads' entries
  // The draw over contiguous chunks of the slice, scanned in order, the CTAs in rank order.
  const int64_t chunk = (n + kThreads - 1) / kThreads;
  const int64_t cb = threadIdx.x * chunk, ce = cb + chunk < n ? cb + chunk : n;
  double local = 0;
  int last = -1;
  for (int64_t i = cb; i < ce; ++i)
    if (kept(i)) local += p[i], last = static_cast<int>(b + i);
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
    pub.d[red.parity] = run;
  }
  cl.sync();
  double totals[kCl];
#pragma unroll
  for (int c = 0; c < kCl; ++c) totals[c] = *cl.map_shared_rank(&pub.d[red.parity], c);
  red.parity ^= 1;
  double before = 0, mass = 0;
#pragma unroll
  for (int c = 0; c < kCl; ++c) {
    if (c == rank) before = mass;
    mass += totals[c];
  }
  const double target = SampleUniform(static_cast<uint64_t>(random_bits[r])) * mass;
  int pick = INT_MAX;
  if (local > 0) {
    double cum = before + chunk_start[threadIdx.x];
    for (int64_t i = cb; i < ce && pick == INT_MAX; ++i) {
      if (!kept(i)) continue;
      cum += p[i];
      if (cum > target) pick = static_cast<int>(b + i);
    }
  }
  pick = red.MinOf(pick);
  last = red.MaxIntOf(last);
  if (rank == 0 && threadIdx.x == 0) out[r] = pick != INT_MAX ? pick : (last >= 0 ? last : 0);
  cl.sync();  // no CTA leaves while another may still read its shared memory
#endif
}

template <int kCl>
void Launch(CudaQueue& cq, int32_t* out, const float* logits, int64_t R, int64_t V, const float* params,
            const int32_t* top_k, const int64_t* random_bits, const unsigned long long* parts, int num_parts,
            size_t smem) {
  const auto kernel = SampleTokensClusterKernel<kCl>;
  VT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  if (kCl > 8) VT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(kCl, static_cast<unsigned>(R));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = cq.stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kCl;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = TakeOverlap(cq) ? 2 : 1;
  VT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, out, logits, V, params, top_k, random_bits, parts, num_parts));
}

}  // namespace

bool LaunchSampleTokensCluster(CudaQueue& cq, int32_t* out, const float* logits, int64_t R, int64_t V,
                               const float* params, const int32_t* top_k, const int64_t* random_bits,
                               const unsigned long long* argmax_parts, int num_parts) {
  static const bool on = SwitchOn("VT_CUDA_SAMPLE_CLUSTER");
  if (!on || cq.cc_major < 9 || R > 65535 || num_parts > kThreads) return false;
  const auto smem_for = [&](int64_t cl) { return static_cast<size_t>(2 * ((V + cl - 1) / cl)) * sizeof(float); };
  if (smem_for(8) <= kSliceSmemBudget) {
    Launch<8>(cq, out, logits, R, V, params, top_k, random_bits, argmax_parts, num_parts, smem_for(8));
  } else if (smem_for(16) <= kSliceSmemBudget) {
    Launch<16>(cq, out, logits, R, V, params, top_k, random_bits, argmax_parts, num_parts, smem_for(16));
  } else {
    return false;
  }
  g_cluster_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t SampleTokensClusterLaunches() { return g_cluster_launches.load(std::memory_order_relaxed); }

}  // namespace vt::cuda
