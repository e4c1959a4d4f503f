// CUDA graphs for vt::Graph: stream capture of a queue's work, replayed on its stream.
#include <string>

#include "vt/cuda/context.h"

namespace vt::cuda {

namespace {

struct CudaGraph : GraphImpl {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaGraphExec_t exec = nullptr;
  KeptBlocks kept;  // blocks the recorded ops allocated and freed: theirs at every replay

  void Replay() override {
    DeviceGuard guard(device);
    VT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  }

  ~CudaGraph() override {
    const int previous = [] {
      int d = 0;
      (void)cudaGetDevice(&d);
      return d;
    }();
    (void)cudaSetDevice(device);
    // A replay may still be running on the stream: its blocks go back to the cache after it.
    (void)cudaStreamSynchronize(stream);
    if (exec) (void)cudaGraphExecDestroy(exec);
    ReturnBlocks(device, kept);
    (void)cudaSetDevice(previous);
  }
};

std::string Describe(cudaError_t e) { return StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e)); }

}  // namespace

std::shared_ptr<GraphImpl> CudaQueue::CaptureGraph(const std::function<void()>& fn, std::string* why_not) {
  DeviceGuard guard(device.index);
  auto g = std::make_shared<CudaGraph>();
  g->device = device.index;
  g->stream = stream;
  std::string failed;
  // Relaxed: the recorded ops may allocate (cudaMalloc is a host call, not stream work); a
  // synchronous copy or a host synchronization still breaks the capture, and is reported.
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why_not) *why_not = "cudaStreamBeginCapture failed: " + Describe(e);
    return nullptr;
  }
  KeepFreedBlocks(device.index, &g->kept);
  try {
    fn();
  } catch (const std::exception& ex) {
    failed = ex.what();
  }
  cudaGraph_t graph = nullptr;
  e = cudaStreamEndCapture(stream, &graph);
  KeepFreedBlocks(device.index, nullptr);
  if (failed.empty() && e != cudaSuccess) failed = "cudaStreamEndCapture failed: " + Describe(e);
  if (failed.empty()) {
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (e != cudaSuccess) failed = "cudaGraphInstantiate failed: " + Describe(e);
  }
  if (graph) (void)cudaGraphDestroy(graph);
  if (!failed.empty()) {
    (void)cudaGetLastError();  // capture errors are not sticky; clear the last one
    if (why_not) *why_not = failed;
    return nullptr;  // g returns the blocks it kept
  }
  return g;
}

}  // namespace vt::cuda
