// Shared by the CUDA benchmarks (cuda_fp8_bench and its .cu parts, cuda_attention_bench):
// CUDA-call checks, the event timing of enqueued work and of a replayed graph.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define CHECK_CUDA(x)                                                                                  \
  do {                                                                                                 \
    cudaError_t e_ = (x);                                                                              \
    if (e_ != cudaSuccess) {                                                                           \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #x, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                                    \
    }                                                                                                  \
  } while (0)

// The same check in a function returning void: prints the error and returns.
#define RETURN_ON_CUDA_ERROR(x)                                                                   \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
      return;                                                                                     \
    }                                                                                             \
  } while (0)

namespace vtllm_bench {

// The median over `reps` of the microseconds between two events around enqueue(rep), per
// call of the `calls` that enqueue issues.
inline double EventMedianUs(cudaStream_t stream, int reps, int calls, const std::function<void(int)>& enqueue) {
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(e0, stream));
    enqueue(r);
    CHECK_CUDA(cudaEventRecord(e1, stream));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms * 1000.0 / calls);
  }
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Instantiates the captured graph, replays it 23 times and gives the median of the last 20
// replays in ms; destroys the graph.
inline cudaError_t ReplayMedianMs(cudaGraph_t graph, cudaStream_t stream, cudaEvent_t t0, cudaEvent_t t1, float& median_ms) {
  cudaGraphExec_t exec;
  cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  const bool instantiated = e == cudaSuccess;
  std::vector<float> ms;
  for (int r = 0; r < 23 && e == cudaSuccess; ++r) {
    float m = 0;
    if ((e = cudaEventRecord(t0, stream)) != cudaSuccess || (e = cudaGraphLaunch(exec, stream)) != cudaSuccess ||
        (e = cudaEventRecord(t1, stream)) != cudaSuccess || (e = cudaEventSynchronize(t1)) != cudaSuccess ||
        (e = cudaEventElapsedTime(&m, t0, t1)) != cudaSuccess)
      break;
    if (r >= 3) ms.push_back(m);
  }
  if (e == cudaSuccess) {
    std::sort(ms.begin(), ms.end());
    median_ms = ms[ms.size() / 2];
  }
  if (instantiated) cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return e;
}

}  // namespace vtllm_bench
