// Fused recipes: a norm or activation followed by FP8 quantization (static per tensor, or
// dynamic per token and group of columns) in one pass.
//
// A recipe is a list of opcodes executed in order. FusedChainComposite runs a recipe by
// dispatching each step to the standalone op on the queue's device; that result is the
// definition of the recipe. A fused kernel must be byte-identical to the composite,
// including the fp8 bytes. The intermediate between the steps is BF16.
#pragma once

#include <cstdint>
#include <span>

#include "vt/queue.h"
#include "vt/registry.h"
#include "vt/tensor.h"

namespace vt {

enum class FOp : uint8_t {
  kRmsNorm,         // RmsNorm(tmp, x, weight, eps, residual?)   -> BF16 tmp
  kRmsNormZeroCentred,  // RmsNormZeroCentred(tmp, x, weight, eps, residual?) -> BF16 tmp
  kRmsNormGated,    // RmsNormGated(tmp, x, gate, weight, eps)   -> BF16 tmp
  kSiluMul,         // SiluMul(tmp, x)                           -> BF16 tmp
  kQuantFp8Static,  // QuantFp8Static(out, tmp, input_scale)
  kQuantFp8PerTokenGroup,  // QuantFp8PerTokenGroup(out, scales, tmp, group_size, amax_floor, scale_floor)
};

namespace recipes {
inline constexpr FOp kRmsNormQuantFp8[] = {FOp::kRmsNorm, FOp::kQuantFp8Static};
inline constexpr FOp kRmsNormZeroCentredQuantFp8[] = {FOp::kRmsNormZeroCentred, FOp::kQuantFp8Static};
inline constexpr FOp kRmsNormGatedQuantFp8[] = {FOp::kRmsNormGated, FOp::kQuantFp8Static};
inline constexpr FOp kSiluMulQuantFp8[] = {FOp::kSiluMul, FOp::kQuantFp8Static};
inline constexpr FOp kRmsNormQuantFp8PerTokenGroup[] = {FOp::kRmsNorm, FOp::kQuantFp8PerTokenGroup};
inline constexpr FOp kRmsNormZeroCentredQuantFp8PerTokenGroup[] = {FOp::kRmsNormZeroCentred,
                                                                  FOp::kQuantFp8PerTokenGroup};
inline constexpr FOp kRmsNormGatedQuantFp8PerTokenGroup[] = {FOp::kRmsNormGated, FOp::kQuantFp8PerTokenGroup};
inline constexpr FOp kSiluMulQuantFp8PerTokenGroup[] = {FOp::kSiluMul, FOp::kQuantFp8PerTokenGroup};
}  // namespace recipes

// The operands of a recipe; each step uses the ones it names.
struct FusedArgs {
  Tensor out;         // F8E4M3, the quantized result
  Tensor x;           // the input of the first step
  Tensor weight;      // norm weight
  Tensor gate;        // RmsNormGated's gate
  Tensor residual;    // optional (undefined: none); RmsNorm adds and updates it in place
  Tensor normed_out;  // optional BF16 side output: the tensor before quantization
  float eps = 1e-6f;
  float input_scale = 1.0f;
  // QuantFp8PerTokenGroup's operands: scales [M, ceil(K / group_size)] F32 and the floors.
  Tensor scales;
  int64_t group_size = 128;
  float amax_floor = 0.0f;
  float scale_floor = 0.0f;
};

void FusedChainComposite(const Queue& q, std::span<const FOp> recipe, const FusedArgs& args);

// optional residual add -> RMSNorm -> BF16 -> QuantFp8Static (optionally also the BF16 tensor).
void RmsNormQuantFp8(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                     float input_scale, const Tensor* residual = nullptr, const Tensor* normed_out = nullptr);
// The same with the zero-centred RMSNorm of Qwen3-Next / Qwen3.5 (RmsNormZeroCentred:
// x_hat * (1 + w) in f32) as the first step.
void RmsNormZeroCentredQuantFp8(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                                float input_scale, const Tensor* residual = nullptr,
                                const Tensor* normed_out = nullptr);
// gated RMSNorm -> BF16 -> QuantFp8Static.
void RmsNormGatedQuantFp8(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate,
                          const Tensor& weight, float eps, float input_scale);
// SiluMul -> BF16 -> QuantFp8Static.
void SiluMulQuantFp8(const Queue& q, const Tensor& out, const Tensor& x, float input_scale);

// The gate/up projection of a static-FP8 SwiGLU MLP and the down projection's input
// quantization, as one op. x8: [M, K] F8E4M3; w_gate_up: [2I, K] F8E4M3 (gate rows, then up
// rows); gate_up: [M, 2I] BF16; out8: [M, I] F8E4M3. Its definition, and its bytes:
//   gate_up = MatmulFp8(x8, w_gate_up, alpha)
//   out8    = SiluMulQuantFp8(gate_up, input_scale)
// So a backend may apply SiLU-mul and quantization to each gate/up pair of products as it
// makes them (it still writes gate_up, which the caller may read or ignore).
void MatmulFp8SiluMulQuantFp8(const Queue& q, const Tensor& out8, const Tensor& gate_up, const Tensor& x8,
                              const Tensor& w_gate_up, float alpha, float input_scale);

// The same three recipes with the dynamic quantizer of block-wise and per-token FP8 in place
// of the static one: x is [M, K] (for SiluMul, [M, 2K]), out [M, K] F8E4M3, scales
// [M, ceil(K / group_size)] F32, and the quantization exactly QuantFp8PerTokenGroup's (its
// floors, its checks) of the BF16 intermediate. Byte-identical to the composite (fp8 bytes
// and scale floats) on every backend.
void RmsNormQuantFp8PerTokenGroup(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                  const Tensor& weight, float eps, int64_t group_size, float amax_floor,
                                  float scale_floor, const Tensor* residual = nullptr,
                                  const Tensor* normed_out = nullptr);
void RmsNormZeroCentredQuantFp8PerTokenGroup(const Queue& q, const Tensor& out, const Tensor& scales,
                                              const Tensor& x, const Tensor& weight, float eps, int64_t group_size,
                                              float amax_floor, float scale_floor, const Tensor* residual = nullptr,
                                              const Tensor* normed_out = nullptr);
void RmsNormGatedQuantFp8PerTokenGroup(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                       const Tensor& gate, const Tensor& weight, float eps, int64_t group_size,
                                       float amax_floor, float scale_floor);
void SiluMulQuantFp8PerTokenGroup(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x,
                                  int64_t group_size, float amax_floor, float scale_floor);

template <>
struct OpTraits<OpId::kRmsNormQuantFp8> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                  float input_scale, const Tensor* residual, const Tensor* normed_out);
};
template <>
struct OpTraits<OpId::kRmsNormZeroCentredQuantFp8> : OpTraits<OpId::kRmsNormQuantFp8> {};
template <>
struct OpTraits<OpId::kRmsNormGatedQuantFp8> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight,
                  float eps, float input_scale);
};
template <>
struct OpTraits<OpId::kSiluMulQuantFp8> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, float input_scale);
};
template <>
struct OpTraits<OpId::kMatmulFp8SiluMulQuantFp8> {
  using Fn = void(const Queue& q, const Tensor& out8, const Tensor& gate_up, const Tensor& x8,
                  const Tensor& w_gate_up, float alpha, float input_scale);
};

template <>
struct OpTraits<OpId::kRmsNormQuantFp8PerTokenGroup> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x, const Tensor& weight,
                  float eps, int64_t group_size, float amax_floor, float scale_floor, const Tensor* residual,
                  const Tensor* normed_out);
};
template <>
struct OpTraits<OpId::kRmsNormZeroCentredQuantFp8PerTokenGroup> : OpTraits<OpId::kRmsNormQuantFp8PerTokenGroup> {};
template <>
struct OpTraits<OpId::kRmsNormGatedQuantFp8PerTokenGroup> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x, const Tensor& gate,
                  const Tensor& weight, float eps, int64_t group_size, float amax_floor, float scale_floor);
};
template <>
struct OpTraits<OpId::kSiluMulQuantFp8PerTokenGroup> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& scales, const Tensor& x, int64_t group_size,
                  float amax_floor, float scale_floor);
};

}  // namespace vt
