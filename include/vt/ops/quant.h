// Static per-tensor FP8 quantization (DESIGN.md, "The FP8 contract").
#pragma once

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

// out[i] = e4m3fn(clamp(float(x[i]) * inv, -448, 448)), inv = 1.0f / input_scale formed
// once in f32; round to nearest even; -0 stays 0x80; NaN stays NaN with its sign.
// x: F32/BF16/F16, contiguous, any shape; out: F8E4M3, same shape.
// input_scale must be finite and > 0. Byte-identical on every backend.
void QuantFp8Static(const Queue& q, const Tensor& out, const Tensor& x, float input_scale);

// Dynamic FP8 quantization per token and per group of G consecutive columns: the
// activation quantizer of block-wise FP8 checkpoints (DeepSeek, Qwen3-*-FP8: G = 128) and
// of compressed-tensors "channel"/"token" dynamic checkpoints (G = K: one group per row).
// x: [M, K] F32/BF16/F16; out: [M, K] F8E4M3; scales: [M, ceil(K/G)] F32.
// For row m and group g (columns [g·G, min((g+1)·G, K)), the last group may be partial),
// every step in f32:
//   amax = max |float(x)| over the group's elements that are not NaN (0 for none)
//   s    = max(max(amax, amax_floor) / 448, scale_floor)      (IEEE division by 448)
//   scales[m, g] = s
//   out[m, k] = e4m3fn(clamp(float(x[m, k]) / s, -448, 448))  (IEEE division, RNE)
// The two formats are the two settings of the floors:
//   block (vLLM per_token_group_quant_fp8):   amax_floor = 1e-10, scale_floor = 0
//   per token (vLLM dynamic_per_token_scaled_fp8_quant): amax_floor = 0,
//                                             scale_floor = 1 / (448 * 512)
// x / s is a division, as vLLM's CUDA kernels compute it (not x * (1/s): the two differ on
// ties). Special values: a NaN element is left out of amax and stays NaN with its sign
// (0x7F / 0xFF), so it does not poison its group's scale and is not hidden either; a ±Inf
// element makes amax and s +Inf, the group's finite elements become ±0 and each ±Inf
// element saturates to ±448 (as QuantFp8Static saturates); -0 stays 0x80.
// The floors must be finite, >= 0, and not both 0 (else an all-zero group divides 0 by 0);
// G >= 1. Byte-identical on every backend (fp8 bytes and scale floats).
void QuantFp8PerTokenGroup(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                           int64_t group_size, float amax_floor, float scale_floor);

// The floors of the two formats (see QuantFp8PerTokenGroup).
inline constexpr float kFp8BlockAmaxFloor = 1e-10f;
inline constexpr float kFp8PerTokenScaleFloor = 1.0f / (448.0f * 512.0f);

// The scale of one group, the definition every backend computes.
VT_HD float Fp8GroupScale(float amax, float amax_floor, float scale_floor) {
  const float a = amax > amax_floor ? amax : amax_floor;
  const float s = a / 448.0f;
  return s > scale_floor ? s : scale_floor;
}

// One element of a group with scale s: x / s, clamped to ±448 (±Inf saturate, also when s
// is +Inf), RNE to e4m3fn; NaN stays NaN with its sign. Host and device, bit for bit.
VT_HD uint8_t Fp8QuantizeDiv(float x, float s) {
  const uint32_t bits = detail::FloatBits(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint8_t>(((bits >> 24) & 0x80u) | 0x7Fu);
  if ((bits & 0x7FFFFFFFu) == 0x7F800000u) return static_cast<uint8_t>(((bits >> 24) & 0x80u) | 0x7Eu);
  float v = x / s;
  if (v > kFp8E4M3Max) v = kFp8E4M3Max;
  if (v < -kFp8E4M3Max) v = -kFp8E4M3Max;
  return FloatToFp8E4M3(v);
}

template <>
struct OpTraits<OpId::kQuantFp8PerTokenGroup> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x, int64_t group_size,
                  float amax_floor, float scale_floor);
};

template <>
struct OpTraits<OpId::kQuantFp8Static> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, float input_scale);
};

}  // namespace vt
