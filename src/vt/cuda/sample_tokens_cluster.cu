// SampleTokens over a thread-block cluster (sm_90): the sampled rows of a step, each row's
// vocabulary split across the kCl CTAs of one cluster.
//
// The single-CTA kernel (sampling.cu) walks a whole row on one SM several times, with a
// double exp per token per walk: for a 152k vocabulary that is a few hundred microseconds
// per step without filters and milliseconds with top_p, whose bisection recomputes every
// probability at each of its steps. Here each CTA keeps its slice of x = logit / T and of
// p = f32(exp(double(x - m))) in shared memory, computed once, and every block-wide count
// or sum becomes a cluster-wide one: each CTA reduces its slice, publishes the result in its
// shared memory, and after one cluster barrier every thread of every CTA combines the kCl
// results in rank order, so all CTAs hold the same value and take the same branches.
//  - top_k's k-th largest key: radix selection, 8 bits a round, over the CTAs' histograms
//    (exact counts: the key a bisection finds).
//  - When top_k leaves at most kGather candidates (the usual k of tens), they are gathered
//    into CTA 0, which finishes the row as the CPU does (sampling.cpp): p* by a walk over
//    the candidates by descending p, the kept mass and the draw in id order.
//  - Else top_p's p* by bisection over p's bit patterns (a cluster sum per step), and the
//    draw over per-thread chunks of each slice, the chunk sums scanned in order, then the
//    CTAs' totals in rank order.
// So the tokens agree with the CPU's except where rounding of a double sum decides a
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
// may take on sm_90 less the static scratch (the gathered candidates' arrays included).
constexpr int64_t kSliceSmemBudget = int64_t{196} << 10;

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

// top_k's candidates when few (keys >= the k-th, at most kGather): gathered into CTA 0,
// which finishes the row as the CPU does (sampling.cpp): the kept mass summed in id order,
// p* by a walk over the candidates sorted by p (descending, tie groups whole), the draw in
// id order. The other CTAs leave after the gather.
constexpr int kGather = 1024;
__device__ unsigned long long g_gathered_rows = 0;  // rows finished by GatherAndDraw (tests)
__shared__ int gathered;
__shared__ int32_t g_ids[kGather], g_by_id[kGather];
__shared__ float g_p[kGather], g_p_by_id[kGather];

template <int kCl>
__device__ void GatherAndDraw(cg::cluster_group& cl, int rank, int64_t r, int64_t b, int64_t n, const float* xs,
                              const float* p, uint32_t kth, float min_p, float top_p, const int64_t* random_bits,
                              int32_t* out) {
  int* count0 = cl.map_shared_rank(&gathered, 0);
  int32_t* ids0 = cl.map_shared_rank(g_ids, 0);
  float* p0 = cl.map_shared_rank(g_p, 0);
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    if (p[i] >= min_p && OrderKey(xs[i]) >= kth) {
      const int at = atomicAdd(count0, 1);
      if (at < kGather) ids0[at] = static_cast<int32_t>(b + i), p0[at] = p[i];
    }
  cl.sync();  // every candidate has landed in CTA 0
  if (rank != 0) return;
  const int m = gathered < kGather ? gathered : kGather;
  for (int a = threadIdx.x; a < m; a += kThreads) {  // rank by id (ids are distinct)
    int before = 0;
    for (int c = 0; c < m; ++c) before += g_ids[c] < g_ids[a] ? 1 : 0;
    g_by_id[before] = g_ids[a];
    g_p_by_id[before] = g_p[a];
  }
  __syncthreads();
  // p* needs the candidates by p descending: rank by (p desc, id asc) into g_ids / g_p.
  if (top_p < 1.0f) {
    for (int a = threadIdx.x; a < m; a += kThreads) {
      int before = 0;
      for (int c = 0; c < m; ++c)
        before += (g_p_by_id[c] > g_p_by_id[a] || (g_p_by_id[c] == g_p_by_id[a] && c < a)) ? 1 : 0;
      g_ids[before] = a;  // the candidate's index in id order
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  double total = 0;
  for (int a = 0; a < m; ++a) total += g_p_by_id[a];
  float p_star = 0.0f;
  if (top_p < 1.0f) {
    const double need = static_cast<double>(top_p) * total;
    double cum = 0;
    for (int j = 0; j < m;) {
      p_star = g_p_by_id[g_ids[j]];
      for (; j < m && g_p_by_id[g_ids[j]] == p_star; ++j) cum += g_p_by_id[g_ids[j]];
      if (cum >= need) break;
    }
  }
  double mass = 0;
  for (int a = 0; a < m; ++a)
    if (g_p_by_id[a] >= p_star) mass += g_p_by_id[a];
  const double target = SampleUniform(static_cast<uint64_t>(random_bits[r])) * mass;
  double cum = 0;
  int32_t last = 0;
  for (int a = 0; a < m; ++a) {
    if (!(g_p_by_id[a] >= p_star)) continue;
    cum += g_p_by_id[a];
    last = g_by_id[a];
    if (cum > target) break;
  }
  out[r] = last;
  atomicAdd(&g_gathered_rows, 1ull);
}

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
  __shared__ int hist[2][256];
  __shared__ int sel[4];
  extern __shared__ float slice_smem[];
  cg::cluster_group cl = cg::this_cluster();
  const int rank = static_cast<int>(cl.block_rank());
  const int64_t r = blockIdx.y;
  const float temperature = params[3 * r], top_p = params[3 * r + 1], min_p = params[3 * r + 2];
  if (temperature < kGreedyTemperature) {  // the same for the whole cluster: no barrier is reached
    if (rank != 0) return;
    GreedyFromParts(out, r, argmax_parts, num_parts, s.u);
    return;
  }
  if (threadIdx.x == 0) gathered = 0;  // CTA 0's; the next cluster barrier precedes any gather
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
  // top_k: the k-th largest key, by radix selection (8 bits a round, the clusters' histograms
  // summed in rank order: exact counts, so the same key as a bisection's).
  const int32_t k = top_k[r];
  const bool use_k = k > 0 && k < V;
  uint32_t kth = 0;
  int64_t at_least_kth = V;  // keys >= kth
  if (use_k) {
    uint32_t prefix = 0;
    int remaining = k, above = 0;
    for (int round = 0; round < 4; ++round) {
      const int shift = 24 - 8 * round;
      int* h = hist[round & 1];
      for (int d = threadIdx.x; d < 256; d += kThreads) h[d] = 0;
      __syncthreads();
      const int64_t iters = (n + kThreads - 1) / kThreads;
      for (int64_t j = 0; j < iters; ++j) {  // whole warps: the match needs every lane
        const int64_t i = threadIdx.x + j * kThreads;
        int d = -1;
        if (i < n) {
          const uint32_t key = OrderKey(xs[i]);
          if (round == 0 || (key >> (shift + 8)) == prefix) d = static_cast<int>((key >> shift) & 255u);
        }
        const unsigned peers = __match_any_sync(0xFFFFFFFFu, d);
        if (d >= 0 && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&h[d], __popc(peers));
      }
      cl.sync();
      if (threadIdx.x < 32) {  // lane l: bins 255 - 8l .. 248 - 8l, summed over the cluster in rank order
        const int lane = static_cast<int>(threadIdx.x);
        int c[8], lane_sum = 0;
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          c[q] = 0;
          for (int cta = 0; cta < kCl; ++cta) c[q] += cl.map_shared_rank(h, cta)[255 - (8 * lane + q)];
          lane_sum += c[q];
        }
        int incl = lane_sum;
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
          const int t = __shfl_up_sync(0xFFFFFFFFu, incl, o);
          if (lane >= o) incl += t;
        }
        const unsigned hit = __ballot_sync(0xFFFFFFFFu, incl >= remaining);
        if (lane == (hit == 0 ? 31 : __ffs(hit) - 1)) {
          int acc = incl - lane_sum, q = 0;
          while (q < 7 && acc + c[q] < remaining) acc += c[q++];
          sel[0] = 255 - (8 * lane + q);
          sel[1] = remaining - acc;
          sel[2] = above + acc;
          sel[3] = c[q];
        }
      }
      __syncthreads();
      prefix = (prefix << 8) | static_cast<uint32_t>(sel[0]);
      remaining = sel[1];
      above = sel[2];
      at_least_kth = above + sel[3];
      __syncthreads();  // sel is rewritten next round
    }
    kth = prefix;
  }
  if (use_k && at_least_kth <= kGather) {
    GatherAndDraw<kCl>(cl, rank, r, b, n, xs, p, kth, min_p, top_p, random_bits, out);
    return;
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
  ScanChunkSums(local, chunk_start);
  if (threadIdx.x == 0) pub.d[red.parity] = chunk_start[kThreads];
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

int64_t SampleTokensGatheredRows() {
  unsigned long long n = 0;
  VT_CUDA_CHECK(cudaMemcpyFromSymbol(&n, g_gathered_rows, sizeof n));
  return static_cast<int64_t>(n);
}

}  // namespace vt::cuda
