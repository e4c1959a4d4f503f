#include "model/step_upload.h"

#include <algorithm>
#include <cstring>

#include "vt/error.h"

namespace vtllm::model {

size_t StepUpload::Bytes(int64_t n, vt::DType dtype) {
  const size_t b = static_cast<size_t>(n) * vt::DTypeSize(dtype);
  return (b + 15) / 16 * 16;
}

bool StepUpload::Reserve(const vt::Queue& q, size_t bytes) {
  if (arena_.defined() && bytes <= capacity_ && q.device() == queue_.device()) return false;
  for (const vt::Event& e : copied_) e.Wait();  // the staging buffers are about to go
  const size_t n = std::max(bytes, capacity_);
  queue_ = q;
  arena_ = vt::Tensor::Empty({static_cast<int64_t>(n)}, vt::DType::kU8, q.device());
  for (vt::HostBuffer& s : staging_) s = vt::HostBuffer(q, n);
  copied_ = {};
  capacity_ = n;
  return true;
}

void StepUpload::Begin() {
  VT_CHECK(arena_.defined(), "StepUpload: Begin before Reserve");
  current_ ^= 1;
  copied_[static_cast<size_t>(current_)].Wait();  // its previous copy has run
  used_ = 0;
}

vt::Tensor StepUpload::Add(const void* src, int64_t n, vt::DType dtype) {
  const size_t bytes = Bytes(n, dtype);
  VT_CHECK(used_ + bytes <= capacity_, "StepUpload: the step's arrays outgrow the ", capacity_,
           " bytes reserved for them");
  auto* stage = static_cast<char*>(staging_[static_cast<size_t>(current_)].data()) + used_;
  std::memcpy(stage, src, static_cast<size_t>(n) * vt::DTypeSize(dtype));
  void* at = static_cast<char*>(arena_.data()) + used_;
  used_ += bytes;
  // The arena outlives the step's views (the model keeps both; Reserve moves the step
  // buffers' generation when it reallocates).
  return vt::Tensor::Borrow(at, vt::Shape{n}, dtype, arena_.device(), nullptr);
}

void StepUpload::Upload() {
  const vt::HostBuffer& s = staging_[static_cast<size_t>(current_)];
  vt::CopyToDeviceAsync(queue_, arena_, s, s.data(), used_);
  copied_[static_cast<size_t>(current_)] = vt::Event::Record(queue_);
}

}  // namespace vtllm::model
