// Tensors: a typed, shaped, strided view over bytes on one device.
//
// A Tensor is a handle: copies share the bytes. Storage is either owned (allocated by
// vt) or borrowed from something kept alive by an owner handle (an mmapped checkpoint).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vt/device.h"
#include "vt/dtype.h"

namespace vt {

using Shape = std::vector<int64_t>;

// A backend's own layout of a read-only tensor's bytes (e.g. a weight re-laid out for its
// kernels), kept with the tensor's storage. The core never looks inside: the backend that
// made it recognises its own type and reads it; every other kernel reads the plain bytes.
struct BackendLayout {
  virtual ~BackendLayout() = default;
};

// The bytes behind one or more tensors.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  std::shared_ptr<void> owner;  // releases the bytes when the last tensor goes
  std::atomic<bool> read_only{false};  // see Tensor::SetReadOnly
  bool allocated_by_vt = false;        // host bytes from Tensor::Empty (ReleaseBytes may free them)
  std::atomic<bool> released{false};   // see Tensor::ReleaseBytes
  // A backend's form of these bytes laid out for its kernels (vt::PrepareWeight), opaque
  // here; set when the storage is made (Tensor::WithBackendLayout) and never changed.
  std::shared_ptr<const BackendLayout> layout;
};

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised contiguous tensor (64-byte aligned on the CPU).
  static Tensor Empty(const Shape& shape, DType dtype, Device device = Device::Cpu());
  // Contiguous tensor holding a copy of `numel * DTypeSize(dtype)` bytes at host `src`.
  static Tensor FromHost(const void* src, const Shape& shape, DType dtype, Device device = Device::Cpu());
  // Borrows `data` (already on `device`) without copying; `owner` keeps it alive.
  static Tensor Borrow(void* data, const Shape& shape, DType dtype, Device device,
                       std::shared_ptr<void> owner);

  // Copies the elements (in row-major order) to host memory; the tensor must be contiguous.
  void CopyToHost(void* dst) const;
  // Copies every element of `src` (same shape and dtype, any device) into this tensor.
  void CopyFrom(const Tensor& src);
  // A contiguous copy on `device`.
  Tensor To(Device device) const;

  // Marks the bytes behind this tensor (every tensor sharing its storage) read-only for
  // good, as a model does with its weights once they are loaded. First waits until every
  // write already issued to the device is complete. From then on vt ops refuse the tensor
  // as an output and CopyFrom refuses it as a destination (vt::Error naming the op and
  // argument), and kernels may read it before earlier work on the queue has finished: the
  // CUDA decode GEMV loads such a weight while the kernel before it still runs. Writing the
  // bytes through data() after this breaks that contract.
  void SetReadOnly() const;
  bool read_only() const { return storage_ != nullptr && storage_->read_only; }
  // For backends (vt::PrepareWeight in vt/prepared.h): this read-only, contiguous tensor's
  // elements in a new storage that holds `layout` besides the same bytes (shared, not
  // copied) and flags, so that its slices carry the layout too. Throws vt::Error for a
  // writable or non-contiguous tensor, or one whose bytes were released.
  Tensor WithBackendLayout(std::shared_ptr<const BackendLayout> layout) const;
  // The layout a backend keeps with this tensor's storage, or null (see WithBackendLayout).
  const BackendLayout* backend_layout() const { return storage_ != nullptr ? storage_->layout.get() : nullptr; }
  // Bytes from the storage's start to this tensor's first element.
  size_t storage_offset() const { return offset_; }
  // Drops the host bytes of a read-only tensor that vt allocated (Empty, FromHost, To) from
  // its storage, for every tensor sharing it, and keeps the storage's backend layout: a
  // weight whose kernels read only a copy laid out for them (vt::PrepareWeight) then does
  // not take its memory twice. The bytes are freed once no other storage holds them (the
  // tensor PrepareWeight was given keeps its own hold). From then on data() throws
  // vt::Error naming the tensor. Returns false and changes nothing for borrowed bytes
  // (Borrow: e.g. a checkpoint's mapping, whose clean pages the OS reclaims once unused)
  // and device memory. Not while an op may be using the tensor.
  bool ReleaseBytes() const;
  bool bytes_released() const { return storage_ != nullptr && storage_->released; }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }  // in elements
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const;
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device : Device::Cpu(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool is_contiguous() const;

  // Address of the first element (device memory for CUDA tensors).
  void* data() const;
  template <typename T>
  T* data_as() const { return static_cast<T*>(data()); }

  // Same elements, new shape; the tensor must be contiguous. One dimension may be -1.
  Tensor View(const Shape& shape) const;
  // Elements [start, end) along dimension `dim` (shares storage; may be non-contiguous).
  Tensor Slice(int dim, int64_t start, int64_t end) const;

  // "[4096, 1024] F8E4M3 cpu" — for messages.
  std::string Describe() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes from storage_->data
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
};

// "[4096, 1024]".
std::string ShapeToString(const Shape& shape);

}  // namespace vt
