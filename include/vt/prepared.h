// Weights in a backend's own layout.
//
// A backend may read a read-only weight from a form of it laid out once for its kernels
// (as ggml keeps a weight in a backend's buffer type, and vLLM re-lays it out in
// process_weights_after_loading). vt::PrepareWeight asks the queue's backend for that
// form; the tensor it returns keeps it in its storage (Tensor::backend_layout), where only
// that backend's kernels look for it. Queues, tensors and op entry points know nothing of
// any particular layout.
#pragma once

#include <cstdint>
#include <span>

#include "vt/device.h"
#include "vt/queue.h"
#include "vt/tensor.h"

namespace vt {

// What a weight is prepared for: the operand whose reads the backend lays out.
enum class WeightUse : uint8_t {
  kMatmulB,             // b [N, K] of vt::Matmul and vt::MatmulFp8 (vt/ops/matmul.h)
  kMatmulGroupScaledB,  // b [N, K] of vt::MatmulFp8GroupScaled (vt/ops/matmul.h)
};
inline constexpr int kNumWeightUses = 2;
const char* WeightUseName(WeightUse use);

// Readies the read-only, contiguous weight w for `use` on q, as w and as each of its row
// slices w.Slice(0, row_starts[i], next start or N) (the shards of a merged weight; none:
// w whole only). Where q's backend keeps a form of such a weight laid out for its kernels
// (the CPU's AVX2 and AVX-512 levels for fp8 weights), it is made now and the result is a
// tensor of w's shape, dtype and bytes (shared, not copied) whose storage also holds it:
// q's kernels then read only that form for the result and those slices, so that an owner
// may free the plain bytes (Tensor::ReleaseBytes on the result). Otherwise
// (no such form for this backend, level or weight, e.g. one whose NaN codes the layout
// cannot keep) the result is w itself, with no backend layout.
Tensor PrepareWeight(const Queue& q, const Tensor& w, WeightUse use, std::span<const int64_t> row_starts = {});

// For backends: the function that prepares weights for one use on one device type, with
// PrepareWeight's contract (arguments already validated). Registered from the backend's
// RegisterKernels; a device type with none leaves every weight as it is.
using WeightPreparerFn = Tensor(const Queue& q, const Tensor& w, WeightUse use, std::span<const int64_t> row_starts);
void RegisterWeightPreparer(DeviceType device, WeightUse use, WeightPreparerFn* fn);

}  // namespace vt
