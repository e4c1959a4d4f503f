#include "vt/queue.h"

#include <algorithm>
#include <thread>

#include "vt/cpu/backend.h"
#include "vt/error.h"
#include "vt/registry.h"
#ifdef VT_WITH_CUDA
#include "vt/cuda/runtime.h"
#endif

namespace vt {

Queue Queue::Cpu(int threads, CpuIsa max_isa) {
  EnsureBackendsRegistered();
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The highest level of this build within both caps (the levels ascend in CpuIsaLevels).
  const CpuIsa cap = std::min(DetectCpuIsa(), max_isa);
  CpuIsa isa = CpuIsa::kScalar;
  for (CpuIsa level : CpuIsaLevels())
    if (level <= cap) isa = level;
  return Queue(std::make_shared<cpu::CpuQueue>(threads, isa));
}

Queue Queue::Cuda(int index) {
  EnsureBackendsRegistered();
#ifdef VT_WITH_CUDA
  return Queue(cuda::MakeQueue(index));
#else
  (void)index;
  throw Error("Queue::Cuda: vtllm was built without CUDA (configure with -DVT_CUDA=ON)");
#endif
}

#ifndef VT_WITH_CUDA
int CudaDeviceCount() { return 0; }
DeviceMemory CudaMemoryInfo(int index) {
  throw Error(StrCat("CudaMemoryInfo(", index, "): vtllm was built without CUDA"));
}
#endif

Device Queue::device() const { return impl_->device; }

void Queue::Synchronize() const { impl_->Synchronize(); }

int Queue::num_threads() const { return cpu::Cpu(*this).pool.size(); }

CpuIsa Queue::cpu_isa() const { return cpu::Cpu(*this).isa; }

void Queue::ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) const {
  cpu::Cpu(*this).pool.ParallelFor(n, grain, fn);
}

}  // namespace vt
