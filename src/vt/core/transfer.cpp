#include "vt/transfer.h"

#include <cstdlib>
#include <cstring>

#include "vt/error.h"
#ifdef VT_WITH_CUDA
#include "vt/cuda/runtime.h"
#endif

namespace vt {

namespace {

[[noreturn, maybe_unused]] void ThrowNoCuda(const char* what) {
  throw Error(StrCat(what, " on cuda: vtllm was built without CUDA (configure with -DVT_CUDA=ON)"));
}

void CheckDeviceSide(const Queue& q, const Tensor& t, size_t bytes, const char* what, const char* name) {
  VT_CHECK(t.defined(), what, ": undefined ", name);
  VT_CHECK(t.device() == q.device(), what, ": ", name, " ", t.Describe(), " is not on the queue's device ",
           ToString(q.device()));
  VT_CHECK(t.is_contiguous(), what, ": ", name, " ", t.Describe(), " is not contiguous");
  VT_CHECK(bytes <= t.nbytes(), what, ": ", bytes, " bytes but ", name, " ", t.Describe(), " has ", t.nbytes());
}

}  // namespace

HostBuffer::HostBuffer(const Queue& q, size_t bytes) : size_(bytes) {
  const size_t n = bytes == 0 ? 1 : bytes;
  if (q.device().is_cuda()) {
#ifdef VT_WITH_CUDA
    data_ = cuda::AllocatePinned(q.device().index, n);
#else
    ThrowNoCuda("HostBuffer");
#endif
  } else {
    void* p = std::aligned_alloc(64, (n + 63) / 64 * 64);
    VT_CHECK(p != nullptr, "HostBuffer: out of host memory (", bytes, " bytes)");
    data_ = std::shared_ptr<void>(p, [](void* x) { std::free(x); });
  }
}

bool HostBuffer::Contains(const void* p, size_t n) const {
  const auto* b = static_cast<const char*>(data_.get());
  const auto* x = static_cast<const char*>(p);
  return b != nullptr && x >= b && n <= size_ && static_cast<size_t>(x - b) <= size_ - n;
}

void CopyToDeviceAsync(const Queue& q, const Tensor& dst, const HostBuffer& staging, const void* src, size_t bytes) {
  CheckDeviceSide(q, dst, bytes, "CopyToDeviceAsync", "destination");
  VT_CHECK(!dst.read_only(), "CopyToDeviceAsync: destination ", dst.Describe(), " is read-only");
  VT_CHECK(staging.Contains(src, bytes), "CopyToDeviceAsync: the ", bytes,
           " source bytes are not inside the staging HostBuffer of ", staging.size(), " bytes");
  if (bytes == 0) return;
  if (q.device().is_cpu()) {
    std::memcpy(dst.data(), src, bytes);
    return;
  }
#ifdef VT_WITH_CUDA
  cuda::CopyAsync(q, dst.data(), src, bytes);
#else
  ThrowNoCuda("CopyToDeviceAsync");
#endif
}

void CopyToHostAsync(const Queue& q, const HostBuffer& staging, void* dst, const Tensor& src, size_t bytes) {
  CheckDeviceSide(q, src, bytes, "CopyToHostAsync", "source");
  VT_CHECK(staging.Contains(dst, bytes), "CopyToHostAsync: the ", bytes,
           " destination bytes are not inside the staging HostBuffer of ", staging.size(), " bytes");
  if (bytes == 0) return;
  if (q.device().is_cpu()) {
    std::memcpy(dst, src.data(), bytes);
    return;
  }
#ifdef VT_WITH_CUDA
  cuda::CopyAsync(q, dst, src.data(), bytes);
#else
  ThrowNoCuda("CopyToHostAsync");
#endif
}

void CopyOnDeviceAsync(const Queue& q, const Tensor& dst, const Tensor& src, size_t bytes) {
  CheckDeviceSide(q, dst, bytes, "CopyOnDeviceAsync", "destination");
  CheckDeviceSide(q, src, bytes, "CopyOnDeviceAsync", "source");
  VT_CHECK(!dst.read_only(), "CopyOnDeviceAsync: destination ", dst.Describe(), " is read-only");
  if (bytes == 0) return;
  if (q.device().is_cpu()) {
    std::memmove(dst.data(), src.data(), bytes);
    return;
  }
#ifdef VT_WITH_CUDA
  cuda::CopyAsync(q, dst.data(), src.data(), bytes);
#else
  ThrowNoCuda("CopyOnDeviceAsync");
#endif
}

struct Event::Impl {
#ifdef VT_WITH_CUDA
  std::shared_ptr<cuda::RecordedEvent> cuda;
#endif
};

Event Event::Record(const Queue& q) {
  Event e;
  if (q.device().is_cpu()) return e;  // CPU work is complete when its op returns
#ifdef VT_WITH_CUDA
  e.impl_ = std::make_shared<Impl>();
  e.impl_->cuda = cuda::RecordEvent(q);
#else
  ThrowNoCuda("Event::Record");
#endif
  return e;
}

bool Event::Ready() const {
#ifdef VT_WITH_CUDA
  if (impl_) return cuda::EventReady(*impl_->cuda);
#endif
  return true;
}

void Event::Wait() const {
#ifdef VT_WITH_CUDA
  if (impl_) cuda::WaitEvent(*impl_->cuda);
#endif
}

}  // namespace vt
