// The floor of a decode step's kernel chain (cuda_fp8_bench --floor): a CUDA graph of N
// kernels that do almost nothing, each reading the value the one before it wrote (so the
// chain is a real dependency chain, as a decoder layer's kernels are), replayed, with and
// without programmatic dependent launch, for grids shaped like a decode step's kernels:
// one CTA (a row kernel: RMSNorm, q/k norm + RoPE of one token), 1024 CTAs of 64 threads
// (a GEMV of a 1024-wide row) and one wave of 1024-thread CTAs (a GEMV of a wide row). The
// time per kernel is what any kernel of that shape costs in a replayed step before it does
// its own work.
//
// Then the cost of many CTAs reading one small row: 112 pairs of a one-CTA kernel that writes
// a 1 KB row (a norm's FP8 output) and a 1024-CTA x 64-thread kernel whose every CTA reads
// that whole row, 16 bytes a thread (the 0.6B q/k/v and gate/up GEMVs' activation read),
// with the producer writing R copies of the row and CTA c reading copy c % R. Where R > 1
// is faster, the few L2 slices that hold one row's lines are what the consumers wait on.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda_bench_util.h"

namespace {

using vtllm_bench::ReplayMedianMs;

// Reads cell[i - 1] after the previous kernel completes, writes cell[i] (CTA 0, thread 0).
__global__ void ChainKernel(uint32_t* cell, int i, int pdl) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (pdl) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
#endif
  if (blockIdx.x == 0 && threadIdx.x == 0) cell[i] = cell[i - 1] + 1;
}

// A launch of grid x threads on stream, overlapped (programmatic dependent launch) when pdl.
cudaLaunchConfig_t LaunchConfig(int grid, int threads, cudaStream_t stream, int pdl, cudaLaunchAttribute (&attr)[1]) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl;
  return cfg;
}

// One CTA: after the previous kernel, writes `replicas` copies of a 1 KB row (64 x 16 bytes).
__global__ void RowProducer(uint32_t* cell, int i, uint4* rows, int replicas, int pdl) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (pdl) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
#endif
  const uint32_t v = cell[i - 1] + 1;
  for (int k = threadIdx.x; k < replicas * 64; k += blockDim.x) rows[k] = make_uint4(v, k, v ^ 0x5A5A5A5Au, k + 1);
  if (threadIdx.x == 0) cell[i] = v;
}

// Every CTA reads its copy of the row, 16 bytes a thread, as a GEMV reads its activation row.
__global__ void RowConsumer(uint32_t* cell, int i, const uint4* rows, int replicas, int pdl) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (pdl) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
#endif
  const uint4 x = __ldg(rows + (blockIdx.x % replicas) * 64 + threadIdx.x);
  uint32_t s = x.x ^ x.z;
  for (int o = 16; o > 0; o >>= 1) s ^= __shfl_xor_sync(0xFFFFFFFFu, s, o);
  if (s == 0x12345678u) cell[0] = s;  // practically never; keeps the load
  if (blockIdx.x == 0 && threadIdx.x == 0) cell[i] = cell[i - 1] + 1;
}

void RunHotRowFloor(cudaStream_t stream, uint32_t* cell, cudaEvent_t t0, cudaEvent_t t1) {
  constexpr int kPairs = 112, kMaxReplicas = 64;
  uint4* rows = nullptr;
  RETURN_ON_CUDA_ERROR(cudaMalloc(&rows, kMaxReplicas * 64 * sizeof(uint4)));
  RETURN_ON_CUDA_ERROR(cudaMemset(rows, 0, kMaxReplicas * 64 * sizeof(uint4)));
  std::printf("hot row: %d pairs (1 CTA x 256 writes R copies of a 1 KB row; 1024 CTAs x 64 read copy c %% R), "
              "replayed; us per pair (median of 20 replays)\n",
              kPairs);
  for (int pdl = 0; pdl < 2; ++pdl)
    for (int replicas : {1, 2, 4, 8, 16, 32, 64}) {
      cudaGraph_t graph;
      RETURN_ON_CUDA_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int i = 1; i <= 2 * kPairs; ++i) {
        const bool consumer = i % 2 == 0;
        cudaLaunchAttribute attr[1];
        const cudaLaunchConfig_t cfg = LaunchConfig(consumer ? 1024 : 1, consumer ? 64 : 256, stream, pdl, attr);
        if (consumer)
          RETURN_ON_CUDA_ERROR(cudaLaunchKernelEx(&cfg, RowConsumer, cell, i, static_cast<const uint4*>(rows), replicas, pdl));
        else
          RETURN_ON_CUDA_ERROR(cudaLaunchKernelEx(&cfg, RowProducer, cell, i, rows, replicas, pdl));
      }
      RETURN_ON_CUDA_ERROR(cudaStreamEndCapture(stream, &graph));
      float median_ms = 0;
      RETURN_ON_CUDA_ERROR(ReplayMedianMs(graph, stream, t0, t1, median_ms));
      uint32_t last = 0;
      RETURN_ON_CUDA_ERROR(cudaMemcpy(&last, cell + 2 * kPairs, sizeof(last), cudaMemcpyDeviceToHost));
      std::printf("  %s R = %2d: %.2f us per pair (last cell %u)\n", pdl ? "PDL  " : "plain", replicas,
                  1000.0 * median_ms / kPairs, last);
    }
  RETURN_ON_CUDA_ERROR(cudaFree(rows));
}

}  // namespace

void RunChainFloor() {
  int sms = 0;
  RETURN_ON_CUDA_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  constexpr int kKernels = 224;  // Qwen3-0.6B: 28 layers of 8 kernels
  uint32_t* cell = nullptr;
  RETURN_ON_CUDA_ERROR(cudaMalloc(&cell, (kKernels + 1) * sizeof(uint32_t)));  // 225 cells: also the 224 of the hot row
  RETURN_ON_CUDA_ERROR(cudaMemset(cell, 0, (kKernels + 1) * sizeof(uint32_t)));
  cudaStream_t stream;
  RETURN_ON_CUDA_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t t0, t1;
  RETURN_ON_CUDA_ERROR(cudaEventCreate(&t0));
  RETURN_ON_CUDA_ERROR(cudaEventCreate(&t1));
  struct Shape {
    const char* name;
    int grid, threads;
  };
  const Shape shapes[] = {{"1 CTA x 256", 1, 256}, {"1024 CTAs x 64", 1024, 64}, {"one wave x 1024", sms, 1024}};
  std::printf("chain floor: %d dependent kernels in a CUDA graph, replayed; us per kernel (median of 20 replays)\n",
              kKernels);
  for (const Shape& s : shapes)
    for (int pdl = 0; pdl < 2; ++pdl) {
      cudaGraph_t graph;
      RETURN_ON_CUDA_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int i = 1; i <= kKernels; ++i) {
        cudaLaunchAttribute attr[1];
        const cudaLaunchConfig_t cfg = LaunchConfig(s.grid, s.threads, stream, pdl, attr);
        RETURN_ON_CUDA_ERROR(cudaLaunchKernelEx(&cfg, ChainKernel, cell, i, pdl));
      }
      RETURN_ON_CUDA_ERROR(cudaStreamEndCapture(stream, &graph));
      float median_ms = 0;
      RETURN_ON_CUDA_ERROR(ReplayMedianMs(graph, stream, t0, t1, median_ms));
      uint32_t last = 0;
      RETURN_ON_CUDA_ERROR(cudaMemcpy(&last, cell + kKernels, sizeof(last), cudaMemcpyDeviceToHost));
      std::printf("  %-16s %s: %.2f us per kernel (%.3f ms the chain; last cell %u)\n", s.name,
                  pdl ? "PDL  " : "plain", 1000.0 * median_ms / kKernels, median_ms, last);
    }
  RunHotRowFloor(stream, cell, t0, t1);
  RETURN_ON_CUDA_ERROR(cudaFree(cell));
}
