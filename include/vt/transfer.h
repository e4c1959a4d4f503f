// Copies ordered with a queue's work that return without waiting for it, and events that
// say when that work is done: what lets a host prepare step n + 1 while the device still
// runs step n.
//
//   vt::HostBuffer in(q, bytes), out(q, bytes);        // page-locked on CUDA
//   vt::CopyToDeviceAsync(q, dev_in, in.data(), bytes);  // after the work enqueued so far
//   ... enqueue ops on q ...
//   vt::CopyToHostAsync(q, out.data(), dev_out, bytes);
//   vt::Event done = vt::Event::Record(q);
//   ... the host prepares the next step ...
//   done.Wait();                                        // out.data() now holds the result
//
// On a CPU queue every op completes before it returns, so these copies are plain memcpy and
// every event is complete. On CUDA the copies are enqueued on the queue's stream; the host
// memory must be a HostBuffer's (page-locked: a copy from pageable memory would wait for the
// stream) and must not change (CopyToDeviceAsync) or be read (CopyToHostAsync) until an
// event recorded after the copy is complete.
#pragma once

#include <cstddef>
#include <memory>

#include "vt/queue.h"
#include "vt/tensor.h"

namespace vt {

// Host memory that copies to and from q's device may use while the host goes on.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(const Queue& q, size_t bytes);
  void* data() const { return data_.get(); }
  size_t size() const { return size_; }
  // Whether [p, p + n) lies inside this buffer.
  bool Contains(const void* p, size_t n) const;

 private:
  std::shared_ptr<void> data_;
  size_t size_ = 0;
};

// Enqueues a copy of `bytes` bytes from src into the start of dst (contiguous, on q's
// device, at least `bytes` long), after the work enqueued on q so far; returns at once.
// src must lie in `staging` (vt::Error otherwise: the copy would not be asynchronous).
void CopyToDeviceAsync(const Queue& q, const Tensor& dst, const HostBuffer& staging, const void* src, size_t bytes);
// Enqueues a copy of the first `bytes` bytes of src (contiguous, on q's device) into dst,
// which must lie in `staging`; returns at once.
void CopyToHostAsync(const Queue& q, const HostBuffer& staging, void* dst, const Tensor& src, size_t bytes);
// Enqueues a copy of the first `bytes` bytes of src into the start of dst, both contiguous
// on q's device; returns at once.
void CopyOnDeviceAsync(const Queue& q, const Tensor& dst, const Tensor& src, size_t bytes);

// A point in a queue's work.
class Event {
 public:
  Event() = default;  // a complete event
  // Marks the work enqueued on q so far.
  static Event Record(const Queue& q);
  // Whether that work is complete (never blocks).
  bool Ready() const;
  // Waits until that work is complete. Throws vt::Error for a kernel that reported an index
  // error since the last synchronisation (as Queue::Synchronize does).
  void Wait() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace vt
