// Internal to moe.cu: the FP8 (MoeExpertsFp8, MoeExpertsFp8PerToken) and BF16 (MoeExperts)
// experts of calls with many tokens as tensor-core tiles over the (token, slot) pairs sorted by expert
// (moe_tiled.cu).
#pragma once

#include <cstdint>

#include "vt/cuda/context.h"
#include "vt/tensor.h"

namespace vt::cuda {

// Whether the tiled kernels take this expert call (out [T, H], x [T, H], w13 [E·2I, H], w2
// [E·H, I]): e4m3fn x and weights with F32 or BF16 out on an sm_89+ device and build
// (MoeExpertsFp8, MoeExpertsFp8PerToken), or BF16 x, weights and out on sm_80+ (MoeExperts);
// H a multiple of 128 and I of 64 (the tiles' widths and depths), at most 1,024 experts (the
// sort's shared counters), 16-byte aligned x and weights, and VT_CUDA_MOE_TILED not 0 (read
// once, for A/B runs).
bool MoeTiledFits(const CudaQueue& cq, const Tensor& out, const Tensor& x, const Tensor& w13, const Tensor& w2);

// The call through the sort, the two tile kernels and the combine of moe_tiled.cu, with the
// scales as the expert ops define them, on the device: MoeExpertsFp8 (x_scales nullptr,
// alpha13 / alpha2 per expert, inv_down = 1 / the down input scale), MoeExpertsFp8PerToken
// (x_scales per token, alpha13 / alpha2 the experts' weight scales) or MoeExperts on BF16
// (no scales: nullptr, 0).
void LaunchMoeTiled(const Queue& q, const Tensor& out, const Tensor& x, const float* x_scales, const Tensor& ids,
                    const Tensor& weights, const Tensor& w13, const float* alpha13, const Tensor& w2, float inv_down,
                    const float* alpha2);

}  // namespace vt::cuda
