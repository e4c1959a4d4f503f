// Small index tensors (token ids, positions, slots, attention metadata) read back to the
// host so that their values are validated, exactly as the CPU kernels do, before a kernel
// uses them as addresses. The read waits for the queue's earlier work (one stream sync).
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "vt/cuda/context.h"
#include "vt/tensor.h"

namespace vt::cuda {

template <typename T>
std::vector<T> ReadToHost(CudaQueue& cq, const Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  if (v.empty()) return v;
  DeviceGuard guard(cq.device.index);
  VT_CUDA_CHECK(cudaMemcpyAsync(v.data(), t.data(), v.size() * sizeof(T), cudaMemcpyDeviceToHost, cq.stream));
  VT_CUDA_CHECK(cudaStreamSynchronize(cq.stream));
  return v;
}

}  // namespace vt::cuda
