// Queues: where ops run. A CPU queue owns a thread pool; a CUDA queue owns a stream.
// Ops are enqueued on a queue; q.Synchronize() waits for everything enqueued so far
// (CPU ops complete before they return).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vt/device.h"

namespace vt {

class Tensor;
struct GraphImpl;

// Instruction-set levels of the CPU backend, from the portable scalar code up. A queue
// uses the highest level of this build (CpuIsaLevels) at or below both what the processor
// has and what it was asked for, so tests can force the scalar (or AVX2, or NEON) kernels
// on any machine. The x86 and the ARM levels are two ladders above kScalar; a build has
// only its processor's (asking an aarch64 queue for kAvx2 gives kScalar).
enum class CpuIsa : int8_t {
  kScalar = 0,
  kAvx2 = 1,        // AVX2 + FMA + F16C
  kAvx512 = 2,      // AVX-512 F/BW/VL/DQ
  kAvx512Bf16 = 3,  // AVX-512 plus BF16 and VNNI
  kAmx = 4,         // kAvx512Bf16 plus AMX-TILE/AMX-BF16 tiles, with the OS's permission
  kNeon = 5,        // aarch64 Advanced SIMD (ASIMD, ARMv8.0-A: every aarch64 Linux processor)
  kNeonBf16 = 6,    // kNeon plus the BF16 extension (BFDOT/BFMMLA/BFCVT, ARMv8.6-A)
  kBest = 100,
};
const char* CpuIsaName(CpuIsa isa);
// What this processor supports: an x86 level on x86-64, an ARM level on aarch64 (from
// getauxval AT_HWCAP/AT_HWCAP2), kScalar elsewhere.
CpuIsa DetectCpuIsa();
// The levels a queue can be asked for in this build, kScalar first (kBest not included): every
// x86 level on x86-64, kScalar, kNeon and kNeonBf16 on aarch64, only kScalar elsewhere.
std::vector<CpuIsa> CpuIsaLevels();
// The instruction-set extensions of this processor that vt's kernel choice looks at, by name,
// in a fixed order. x86-64 (cpuid): avx2 fma f16c avx512f avx512bw avx512vl avx512dq
// avx512bf16 avx512vnni avx512vbmi amx. aarch64 (getauxval AT_HWCAP/AT_HWCAP2, the kernel's
// /proc/cpuinfo names): asimd asimdhp asimddp fphp bf16 i8mm sve sve2. DetectCpuIsa chooses
// from the same bits.
std::vector<std::string> CpuFeatures();

// Number of CUDA devices visible to this process: 0 in a build without CUDA or without a GPU.
int CudaDeviceCount();

// Free and total bytes of CUDA device `index` (cudaMemGetInfo); throws vt::Error in a build
// without CUDA or when the device is absent.
struct DeviceMemory {
  size_t free_bytes = 0, total_bytes = 0;
};
DeviceMemory CudaMemoryInfo(int index);

class Queue {
 public:
  // threads <= 0: one per hardware thread.
  static Queue Cpu(int threads = 0, CpuIsa max_isa = CpuIsa::kBest);
  // Throws vt::Error when vtllm was built without CUDA or the device is absent.
  static Queue Cuda(int index = 0);

  Device device() const;
  void Synchronize() const;

  // CPU queues only (throws otherwise).
  int num_threads() const;
  CpuIsa cpu_isa() const;
  // Runs fn(begin, end) over [0, n) in contiguous chunks of at least `grain` items, on the
  // pool's threads and the caller's; returns when all are done.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) const;

  struct Impl;
  Impl* impl() const { return impl_.get(); }
  explicit Queue(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<Impl> impl_;
};

struct Queue::Impl {
  explicit Impl(Device d) : device(d) {}
  virtual ~Impl() = default;
  virtual void Synchronize() {}
  // Records what fn enqueues (vt::Graph::Capture); the default records nothing.
  virtual std::shared_ptr<GraphImpl> CaptureGraph(const std::function<void()>& fn, std::string* why_not);
  Device device;
};

}  // namespace vt
