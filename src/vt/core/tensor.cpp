#include "vt/tensor.h"

#include <numeric>

#include "vt/core/memory.h"
#include "vt/error.h"

namespace vt {

namespace {

Shape ContiguousStrides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

int64_t NumelOf(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void CheckShape(const Shape& shape, const char* what) {
  for (int64_t d : shape) VT_CHECK(d >= 0, what, ": negative dimension in shape ", ShapeToString(shape));
}

}  // namespace

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor Tensor::Empty(const Shape& shape, DType dtype, Device device) {
  CheckShape(shape, "Tensor::Empty");
  Tensor t;
  t.shape_ = shape;
  t.strides_ = ContiguousStrides(shape);
  t.dtype_ = dtype;
  t.storage_ = detail::AllocateStorage(device, static_cast<size_t>(NumelOf(shape)) * DTypeSize(dtype));
  return t;
}

Tensor Tensor::FromHost(const void* src, const Shape& shape, DType dtype, Device device) {
  Tensor t = Empty(shape, dtype, device);
  detail::CopyBytes(t.data(), device, src, Device::Cpu(), t.nbytes());
  return t;
}

Tensor Tensor::Borrow(void* data, const Shape& shape, DType dtype, Device device,
                      std::shared_ptr<void> owner) {
  CheckShape(shape, "Tensor::Borrow");
  Tensor t;
  t.shape_ = shape;
  t.strides_ = ContiguousStrides(shape);
  t.dtype_ = dtype;
  auto s = std::make_shared<Storage>();
  s->data = data;
  s->nbytes = static_cast<size_t>(NumelOf(shape)) * DTypeSize(dtype);
  s->device = device;
  s->owner = std::move(owner);
  t.storage_ = std::move(s);
  return t;
}

void Tensor::CopyToHost(void* dst) const {
  VT_CHECK(defined(), "CopyToHost: undefined tensor");
  VT_CHECK(is_contiguous(), "CopyToHost: tensor ", Describe(), " is not contiguous");
  detail::CopyBytes(dst, Device::Cpu(), data(), device(), nbytes());
}

void Tensor::CopyFrom(const Tensor& src) {
  VT_CHECK(defined() && src.defined(), "CopyFrom: undefined tensor");
  VT_CHECK(!read_only(), "CopyFrom: destination ", Describe(), " is read-only (Tensor::SetReadOnly)");
  VT_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "CopyFrom: destination ", Describe(),
           " does not match source ", src.Describe());
  VT_CHECK(is_contiguous() && src.is_contiguous(), "CopyFrom: both tensors must be contiguous (",
           Describe(), " <- ", src.Describe(), ")");
  detail::CopyBytes(data(), device(), src.data(), src.device(), nbytes());
}

void Tensor::SetReadOnly() const {
  VT_CHECK(defined(), "SetReadOnly: undefined tensor");
  if (storage_->read_only) return;
  detail::FinishWrites(device());
  storage_->read_only = true;
}

Tensor Tensor::WithBackendLayout(std::shared_ptr<const BackendLayout> layout) const {
  VT_CHECK(read_only(), "WithBackendLayout: ", Describe(),
           " is writable; only read-only tensors (Tensor::SetReadOnly) may have a backend layout");
  VT_CHECK(is_contiguous(), "WithBackendLayout: ", Describe(), " is not contiguous");
  VT_CHECK(layout != nullptr, "WithBackendLayout: no layout for ", Describe());
  auto s = std::make_shared<Storage>();
  s->data = data();  // throws if released
  s->nbytes = nbytes();
  s->device = storage_->device;
  s->owner = storage_->owner;  // the bytes themselves, not this tensor's storage
  s->read_only = true;
  s->allocated_by_vt = storage_->allocated_by_vt;
  s->layout = std::move(layout);
  Tensor t;
  t.storage_ = std::move(s);
  t.shape_ = shape_;
  t.strides_ = ContiguousStrides(shape_);
  t.dtype_ = dtype_;
  return t;
}

bool Tensor::ReleaseBytes() const {
  VT_CHECK(read_only(), "ReleaseBytes: ", Describe(), " is writable; only read-only tensors may release their bytes");
  if (!storage_->allocated_by_vt || !device().is_cpu()) return false;
  if (storage_->released.exchange(true)) return true;
  storage_->data = nullptr;
  storage_->owner.reset();
  return true;
}

Tensor Tensor::To(Device device) const {
  Tensor out = Empty(shape_, dtype_, device);
  out.CopyFrom(*this);
  return out;
}

int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int j = i < 0 ? i + n : i;
  VT_CHECK(j >= 0 && j < n, "dimension ", i, " out of range for tensor ", Describe());
  return shape_[j];
}

int64_t Tensor::numel() const { return NumelOf(shape_); }

bool Tensor::is_contiguous() const {
  // Row-major with no gaps; the stride of a dimension of size 1 does not matter.
  int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data() const {
  if (!storage_) return nullptr;
  VT_CHECK(!storage_->released, "the bytes of ", Describe(),
           " were released (Tensor::ReleaseBytes): only kernels that read its re-laid-out copy can use it");
  return static_cast<char*>(storage_->data) + offset_;
}

Tensor Tensor::View(const Shape& shape) const {
  VT_CHECK(is_contiguous(), "View: tensor ", Describe(), " is not contiguous");
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      VT_CHECK(infer < 0, "View: more than one -1 in ", ShapeToString(shape));
      infer = static_cast<int>(i);
    } else {
      VT_CHECK(s[i] >= 0, "View: negative dimension in ", ShapeToString(shape));
      known *= s[i];
    }
  }
  if (infer >= 0) {
    VT_CHECK(known > 0 && numel() % known == 0, "View: cannot view ", Describe(), " as ", ShapeToString(shape));
    s[infer] = numel() / known;
  }
  VT_CHECK(NumelOf(s) == numel(), "View: cannot view ", Describe(), " as ", ShapeToString(shape));
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = ContiguousStrides(s);
  return t;
}

Tensor Tensor::Slice(int dim, int64_t start, int64_t end) const {
  const int n = ndim();
  const int d = dim < 0 ? dim + n : dim;
  VT_CHECK(d >= 0 && d < n, "Slice: dimension ", dim, " out of range for ", Describe());
  VT_CHECK(0 <= start && start <= end && end <= shape_[d], "Slice: [", start, ", ", end,
           ") out of range for dimension ", d, " of ", Describe());
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(start * strides_[d]) * DTypeSize(dtype_);
  t.shape_[d] = end - start;
  return t;
}

std::string Tensor::Describe() const {
  if (!defined()) return "<undefined tensor>";
  return ShapeToString(shape_) + " " + std::string(DTypeName(dtype_)) + " " + ToString(device());
}

}  // namespace vt
