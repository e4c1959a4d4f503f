// Activation buffers of a model's step: one per slot, allocated for the largest step seen and
// sliced to each step's rows, so a step of a size seen before allocates nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "vt/device.h"
#include "vt/tensor.h"

namespace vtllm::model {

// Counts reallocations of a step's device buffers (activation slots, quantized inputs, step
// inputs). A recorded step graph holds their addresses, so a graph recorded before the
// count last moved may use freed memory and is recorded again (Model::ExecuteGraph).
inline std::atomic<uint64_t>& StepBufferGeneration() {
  static std::atomic<uint64_t> generation{0};
  return generation;
}

enum ActivationSlot {
  kSlotQkv,
  kSlotResidual,
  kSlotHidden,
  kSlotNormed,
  kSlotX8,
  kSlotX8Scales,
  kSlotQ,
  kSlotK,
  kSlotV,
  kSlotQn,
  kSlotAttn,
  kSlotAttnOut,
  kSlotGateUp,
  kSlotAct,
  kSlotAct8,
  kSlotRows,
  kSlotRouterLogits,
  kSlotTopKIds,
  kSlotTopKWeights,
  kSlotSharedExpert,
  kSlotSharedGate,
  // Gated DeltaNet and gated attention (hybrid models).
  kSlotGdnQ,
  kSlotGdnK,
  kSlotGdnV,
  kSlotGdnZ,
  kSlotGdnA,
  kSlotGdnB,
  kSlotGdnConvQ,
  kSlotGdnConvK,
  kSlotGdnConvV,
  kSlotGdnCore,
  kSlotGdnNormed,
  kSlotAttnGate,
  kSlotAttnGated,
  // Tensor parallelism: this rank's vocabulary columns of the logits.
  kSlotLogitsShard,
  // The per-token-group scales of kSlotAct8 (block / per-channel FP8 down projections), and the
  // Gated DeltaNet's out_proj input quantized with its gated norm, and its scales.
  kSlotAct8Scales,
  kSlotGdnX8,
  kSlotGdnX8Scales,
  // The attention output quantized for a static-FP8 o_proj (PagedAttentionQuantFp8).
  kSlotAttn8,
};

class ActivationBuffers {
 public:
  explicit ActivationBuffers(vt::Device device = vt::Device::Cpu()) : device_(device) {}
  // Rows [0, rows) of slot's [>= rows, cols] tensor of `dtype`.
  vt::Tensor Get(ActivationSlot slot, int64_t rows, int64_t cols, vt::DType dtype) {
    const size_t i = static_cast<size_t>(slot);
    if (slots_.size() <= i) slots_.resize(i + 1);
    vt::Tensor& t = slots_[i];
    if (!t.defined() || t.dim(0) < rows || t.dim(1) != cols || t.dtype() != dtype) {
      t = vt::Tensor::Empty({rows, cols}, dtype, device_);
      ++StepBufferGeneration();
    }
    return t.Slice(0, 0, rows);
  }

 private:
  vt::Device device_;
  std::vector<vt::Tensor> slots_;
};

}  // namespace vtllm::model
