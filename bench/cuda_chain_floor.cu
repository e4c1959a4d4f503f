// The floor of a decode step's kernel chain (cuda_fp8_bench --floor): a CUDA graph of N
// kernels that do almost nothing, each reading the value the one before it wrote (so the
// chain is a real dependency chain, as a decoder layer's kernels are), replayed, with and
// without programmatic dependent launch, for grids shaped like a decode step's kernels:
// one CTA (a row kernel: RMSNorm, q/k norm + RoPE of one token), 1024 CTAs of 64 threads
// (a GEMV of a 1024-wide row) and one wave of 1024-thread CTAs (a GEMV of a wide row). The
// time per kernel is what any kernel of that shape costs in a replayed step before it does
// its own work.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

#define FLOOR_CHECK(x)                                                                            \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
      return;                                                                                     \
    }                                                                                             \
  } while (0)

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

}  // namespace

void RunChainFloor() {
  int sms = 0;
  FLOOR_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  constexpr int kKernels = 224;  // Qwen3-0.6B: 28 layers of 8 kernels
  uint32_t* cell = nullptr;
  FLOOR_CHECK(cudaMalloc(&cell, (kKernels + 1) * sizeof(uint32_t)));
  FLOOR_CHECK(cudaMemset(cell, 0, (kKernels + 1) * sizeof(uint32_t)));
  cudaStream_t stream;
  FLOOR_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t t0, t1;
  FLOOR_CHECK(cudaEventCreate(&t0));
  FLOOR_CHECK(cudaEventCreate(&t1));
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
      FLOOR_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int i = 1; i <= kKernels; ++i) {
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(s.grid);
        cfg.blockDim = dim3(s.threads);
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = pdl;
        FLOOR_CHECK(cudaLaunchKernelEx(&cfg, ChainKernel, cell, i, pdl));
      }
      FLOOR_CHECK(cudaStreamEndCapture(stream, &graph));
      cudaGraphExec_t exec;
      FLOOR_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      std::vector<float> ms;
      for (int r = 0; r < 23; ++r) {
        FLOOR_CHECK(cudaEventRecord(t0, stream));
        FLOOR_CHECK(cudaGraphLaunch(exec, stream));
        FLOOR_CHECK(cudaEventRecord(t1, stream));
        FLOOR_CHECK(cudaEventSynchronize(t1));
        float m = 0;
        FLOOR_CHECK(cudaEventElapsedTime(&m, t0, t1));
        if (r >= 3) ms.push_back(m);
      }
      std::sort(ms.begin(), ms.end());
      uint32_t last = 0;
      FLOOR_CHECK(cudaMemcpy(&last, cell + kKernels, sizeof(last), cudaMemcpyDeviceToHost));
      std::printf("  %-16s %s: %.2f us per kernel (%.3f ms the chain; last cell %u)\n", s.name,
                  pdl ? "PDL  " : "plain", 1000.0 * ms[ms.size() / 2] / kKernels, ms[ms.size() / 2], last);
      FLOOR_CHECK(cudaGraphExecDestroy(exec));
      FLOOR_CHECK(cudaGraphDestroy(graph));
    }
  FLOOR_CHECK(cudaFree(cell));
}
