// vt/transfer.h on CUDA: page-locked host buffers, copies on a queue's stream, and events.
#include "vt/cuda/context.h"
#include "vt/cuda/runtime.h"

namespace vt::cuda {

std::shared_ptr<void> AllocatePinned(int device, size_t bytes) {
  DeviceGuard guard(device);
  void* p = nullptr;
  VT_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return std::shared_ptr<void>(p, [](void* x) { (void)cudaFreeHost(x); });
}

void CopyAsync(const Queue& q, void* dst, const void* src, size_t n) {
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  VT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, cq.stream));
}

struct RecordedEvent {
  int device = 0;
  cudaEvent_t event = nullptr;
  ~RecordedEvent() {
    if (event != nullptr) (void)cudaEventDestroy(event);
  }
};

std::shared_ptr<RecordedEvent> RecordEvent(const Queue& q) {
  CudaQueue& cq = Cuda(q);
  DeviceGuard guard(cq.device.index);
  auto e = std::make_shared<RecordedEvent>();
  e->device = cq.device.index;
  VT_CUDA_CHECK(cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming));
  VT_CUDA_CHECK(cudaEventRecord(e->event, cq.stream));
  return e;
}

bool EventReady(const RecordedEvent& e) {
  const cudaError_t r = cudaEventQuery(e.event);
  if (r == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  VT_CUDA_CHECK(r);
  return true;
}

void WaitEvent(const RecordedEvent& e) {
  VT_CUDA_CHECK(cudaEventSynchronize(e.event));
  ThrowPendingIndexError(e.device);
}

}  // namespace vt::cuda
