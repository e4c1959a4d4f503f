// Internal to moe.cu: the static FP8 experts (MoeExpertsFp8) of calls with many tokens as
// tensor-core tiles over the (token, slot) pairs sorted by expert (moe_tiled.cu).
#pragma once

#include <cstdint>

#include "vt/cuda/context.h"
#include "vt/tensor.h"

namespace vt::cuda {

// Whether the tiled kernels take this MoeExpertsFp8 call: an sm_89+ device, H a multiple
// of 128 and I of 64 (the tiles' widths and depths), at most 1,024 experts (the sort's
// shared counters), 16-byte aligned x8 and weights, and VT_CUDA_MOE_TILED not 0 (read
// once, for A/B runs).
bool MoeTiledFits(const CudaQueue& cq, int64_t H, int64_t I, int64_t E, const Tensor& x8, const Tensor& w13,
                  const Tensor& w2);

// MoeExpertsFp8 (out [T, H] in F32 or BF16, x8 [T, H] e4m3fn codes, ids / weights [T, k],
// w13 [E·2I, H], w2 [E·H, I], alpha13 / alpha2 [E] on the device, inv_down = 1 / the down
// input scale) through the sort, the two tile kernels and the combine of moe_tiled.cu.
void LaunchMoeTiledFp8(CudaQueue& cq, const Tensor& out, const Tensor& x8, const Tensor& ids, const Tensor& weights,
                       const Tensor& w13, const float* alpha13, const Tensor& w2, float inv_down, const float* alpha2);

}  // namespace vt::cuda
