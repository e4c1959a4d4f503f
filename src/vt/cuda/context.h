// What the CUDA kernels share: the queue (stream, cuBLASLt handle, workspace), the error
// checks that name the statement and file:line, and a device guard.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "vt/cuda/device_error.h"
#include "vt/error.h"
#include "vt/graph.h"
#include "vt/queue.h"

#ifdef VT_CUDA_CUBLASLT
#include <cublasLt.h>
#endif

namespace vt::cuda {

namespace detail {
[[noreturn]] void ThrowCudaError(int code, const char* name, const char* text, const char* stmt,
                                 const char* file, int line);
inline void Check(cudaError_t e, const char* stmt, const char* file, int line) {
  if (e != cudaSuccess) ThrowCudaError(static_cast<int>(e), cudaGetErrorName(e), cudaGetErrorString(e), stmt, file, line);
}
}  // namespace detail

// Sets the calling thread's current device for a scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

struct CudaQueue : Queue::Impl {
  explicit CudaQueue(int index);
  ~CudaQueue() override;
  void Synchronize() override;
  std::shared_ptr<GraphImpl> CaptureGraph(const std::function<void()>& fn, std::string* why_not) override;  // graph.cpp

  cudaStream_t stream = nullptr;
  // The device's index-error record (device_error.h), looked up once per queue.
  IndexErrorRecord* index_errors = nullptr;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t smem_per_block_optin = 0;  // the most dynamic shared memory a kernel may opt in to
  // Arrival counters of split decode attention (one per sequence and KV head of a step,
  // kSplitCounters of them): zero between launches, each reset by the CTA that arrives last.
  static constexpr int64_t kSplitCounters = int64_t{1} << 16;
  int32_t* split_counters = nullptr;
  // Set after a library kernel that may let the next kernel launch before it ends
  // (cuBLASLt's scaled FP8 GEMMs): the next launch is then not overlapped (TakeOverlap), a
  // precaution (its waiting CTAs cannot hold SMs the library kernel's remaining CTAs need).
  // It was added for a block-FP8 server hang that turned out to have another cause (a row
  // count not a multiple of 4, matmul.cpp) and is kept since the servers measured with it.
  bool serialize_next = false;
  // Launches that asked TakeOverlap so far, and the key cache that the QK-norm/RoPE/cache-
  // write prelude (qk_norm_rope.cu) wrote at launch number prelude_launch. A decode attention
  // over that cache launched right after it (no overlapped launch between) may read its
  // metadata and every cached token but the step's before griddepcontrol.wait (attention.cu):
  // the prelude waits before it lets the next kernel start, so everything before the prelude
  // has completed, and the prelude writes only the queries and the step's tokens.
  uint64_t overlap_asks = 0;
  const void* prelude_key_cache = nullptr;
  uint64_t prelude_launch = 0;
#ifdef VT_CUDA_CUBLASLT
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Algorithms chosen by the cuBLASLt heuristic, per problem; guarded by `mu`.
  std::mutex mu;
  std::map<std::tuple<int, int64_t, int64_t, int64_t, int, int>, cublasLtMatmulAlgo_t> algos;
  std::map<std::tuple<int, int64_t, int64_t, int64_t, int, int>, bool> no_algo;
#endif
};

// The CUDA queue behind `q` (an internal error if a CUDA kernel got another queue).
CudaQueue& Cuda(const Queue& q);

// Whether kernels launch overlapped (programmatic dependent launch, LaunchOverlapped in
// device_util.cuh): on sm_90 and later unless VT_CUDA_PDL=0 (read once; for measuring
// what the overlap gains).
bool OverlappedLaunches(const CudaQueue& cq);
// Whether the next kernel launch on cq may be overlapped: OverlappedLaunches(cq), unless
// serialize_next was set (which this clears).
inline bool TakeOverlap(CudaQueue& cq) {
  ++cq.overlap_asks;
  const bool serialize = cq.serialize_next;
  cq.serialize_next = false;
  return !serialize && OverlappedLaunches(cq);
}
// An A/B switch for benchmarks and tests: true unless the environment variable `name` is "0".
bool SwitchOn(const char* name);

// Blocks of the caching allocator (runtime.cpp) that a recorded graph keeps: while `keep` is
// set for a device, blocks freed on it go there instead of back to the cache (a graph's ops
// may still use them at every replay); ReturnBlocks gives them back when the graph is gone.
using KeptBlocks = std::vector<std::pair<void*, size_t>>;
void KeepFreedBlocks(int device, KeptBlocks* keep);
void ReturnBlocks(int device, KeptBlocks& blocks);

}  // namespace vt::cuda

#define VT_CUDA_CHECK(stmt) ::vt::cuda::detail::Check((stmt), #stmt, __FILE__, __LINE__)
// After a kernel launch: reports launch errors with the kernel's name.
#define VT_CUDA_CHECK_LAUNCH(kernel) ::vt::cuda::detail::Check(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)
