// The CUDA backend's entry points called by the vt core (memory, queues, registry). This
// header has no CUDA includes, so core files compiled without nvcc can include it.
#pragma once

#include <cstddef>
#include <memory>

#include "vt/device.h"
#include "vt/queue.h"
#include "vt/tensor.h"

namespace vt::cuda {

// Bytes on CUDA device `device` from a caching allocator: freed blocks return to a
// per-device cache and are reused in stream order (every queue's stream synchronises with
// the legacy default stream, which the copies use).
std::shared_ptr<Storage> AllocateStorage(int device, size_t nbytes);

// Copies n bytes between host and/or CUDA devices; returns when the copy is complete.
// Large host-to-device copies go through pinned staging buffers.
void CopyBytes(void* dst, Device dst_device, const void* src, Device src_device, size_t n);

// Page-locked host memory of `bytes` bytes for copies with device `device` (vt::HostBuffer).
std::shared_ptr<void> AllocatePinned(int device, size_t bytes);
// Enqueues a copy of n bytes on q's stream (host page-locked or device memory on either side);
// returns at once (vt/transfer.h).
void CopyAsync(const Queue& q, void* dst, const void* src, size_t n);
// A CUDA event recorded on a queue's stream (vt::Event).
struct RecordedEvent;
std::shared_ptr<RecordedEvent> RecordEvent(const Queue& q);
bool EventReady(const RecordedEvent& e);
// Waits for the event, then throws any index error a kernel recorded on its device.
void WaitEvent(const RecordedEvent& e);

// Returns when all work issued to CUDA device `device` is complete.
void SynchronizeDevice(int device);

// A queue owning a stream, a cuBLASLt handle and its workspace on device `index`.
// Throws vt::Error naming the device when it is absent.
std::shared_ptr<Queue::Impl> MakeQueue(int index);

// The cudaStream_t of a CUDA queue, as void* (for benchmarks timing with CUDA events).
void* NativeStream(const Queue& q);

// Registers every CUDA kernel built into this library (Register<OpId::...>(kCUDA, ...)).
void RegisterKernels();

}  // namespace vt::cuda
