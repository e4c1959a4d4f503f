// Fused recipes: a norm or activation followed by static FP8 quantization in one pass.
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
  kRmsNormGated,    // RmsNormGated(tmp, x, gate, weight, eps)   -> BF16 tmp
  kSiluMul,         // SiluMul(tmp, x)                           -> BF16 tmp
  kQuantFp8Static,  // QuantFp8Static(out, tmp, input_scale)
};

namespace recipes {
inline constexpr FOp kRmsNormQuantFp8[] = {FOp::kRmsNorm, FOp::kQuantFp8Static};
inline constexpr FOp kRmsNormGatedQuantFp8[] = {FOp::kRmsNormGated, FOp::kQuantFp8Static};
inline constexpr FOp kSiluMulQuantFp8[] = {FOp::kSiluMul, FOp::kQuantFp8Static};
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
};

void FusedChainComposite(const Queue& q, std::span<const FOp> recipe, const FusedArgs& args);

// optional residual add -> RMSNorm -> BF16 -> QuantFp8Static (optionally also the BF16 tensor).
void RmsNormQuantFp8(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                     float input_scale, const Tensor* residual = nullptr, const Tensor* normed_out = nullptr);
// gated RMSNorm -> BF16 -> QuantFp8Static.
void RmsNormGatedQuantFp8(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate,
                          const Tensor& weight, float eps, float input_scale);
// SiluMul -> BF16 -> QuantFp8Static.
void SiluMulQuantFp8(const Queue& q, const Tensor& out, const Tensor& x, float input_scale);

template <>
struct OpTraits<OpId::kRmsNormQuantFp8> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& weight, float eps,
                  float input_scale, const Tensor* residual, const Tensor* normed_out);
};
template <>
struct OpTraits<OpId::kRmsNormGatedQuantFp8> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight,
                  float eps, float input_scale);
};
template <>
struct OpTraits<OpId::kSiluMulQuantFp8> {
  using Fn = void(const Queue& q, const Tensor& out, const Tensor& x, float input_scale);
};

}  // namespace vt
