// A step's inputs on the device, in one copy: the host lays the step's arrays (token ids,
// positions, slots, block tables, ...) out in a page-locked staging buffer, and one copy
// enqueued on the model's queue moves them into one device arena whose slices are the step's
// views. Offsets depend only on the arrays' lengths, so a graph recorded over one step's
// views reads every later step of the same shape at the same addresses. Two staging buffers
// alternate, each refilled only once the copy out of it has run, so the host can lay out
// step n + 1 while the device still runs step n.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "vt/transfer.h"

namespace vtllm::model {

class StepUpload {
 public:
  // Bytes an array of n values of `dtype` takes in the arena (rounded up to 16).
  static size_t Bytes(int64_t n, vt::DType dtype);
  // Makes room for `bytes` bytes of arrays; true when the arena was (re)allocated, which
  // moves every view's address.
  bool Reserve(const vt::Queue& q, size_t bytes);
  size_t capacity() const { return capacity_; }

  // Starts a step's layout.
  void Begin();
  // Appends n values of `dtype` from host memory; returns their device view [n], filled once
  // Upload has run on the queue.
  vt::Tensor Add(const void* src, int64_t n, vt::DType dtype);
  // Enqueues the copy of everything added since Begin.
  void Upload();

 private:
  vt::Queue queue_ = vt::Queue::Cpu(1);
  vt::Tensor arena_;  // [capacity_] U8 on the device
  std::array<vt::HostBuffer, 2> staging_;
  std::array<vt::Event, 2> copied_;  // the last copy out of each staging buffer
  size_t capacity_ = 0, used_ = 0;
  int current_ = 0;
};

}  // namespace vtllm::model
