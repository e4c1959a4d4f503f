// The sparse mixture-of-experts MLP of a decoder layer (HF's Qwen3MoeSparseMoeBlock, vLLM's
// FusedMoE): router logits x · gateᵀ in f32 -> softmax top-k routing (renormalised when
// norm_topk_prob) -> the chosen experts' SwiGLU MLPs, weighted and summed. With a shared
// expert (Qwen2-MoE's Qwen2MoeSparseMoeBlock: shared_expert_intermediate_size > 0) the sum
// gains sigmoid(x · shared_expert_gateᵀ) * shared_expert(x): a dense SwiGLU MLP
// (`<prefix>shared_expert.{gate,up,down}_proj`, quantized like any linear) and its one-row
// gate `<prefix>shared_expert_gate.weight` [1, H], kept unquantized, its logit in f32.
//
// Checkpoint names: `<prefix>gate.weight` [E, H] (the router, kept in BF16/F32 as stored),
// and the experts in either of two layouts, told apart by which tensors exist:
// - per expert (transformers 4, Qwen3-MoE releases): `<prefix>experts.<e>.{gate,up,down}_proj.weight`
//   [I, H], [I, H], [H, I];
// - fused (transformers 5, Qwen3.5-MoE releases): `<prefix>experts.gate_up_proj` [E, 2I, H]
//   (each expert's gate rows, then its up rows) and `<prefix>experts.down_proj` [E, H, I].
// At load the experts are stacked as vLLM's fused MoE keeps them: w_gate_up [E * 2I, H]
// (expert e's gate rows then its up rows), w_down [E * H, I] (the fused layout already is).
// A tensor of the wrong shape is an error naming it and the shape the config implies.
//
// Static FP8 experts (ModelOpt / compressed-tensors per-tensor, vLLM's semantics): each
// projection has its weight_scale and input_scale; one input scale per projection kind
// across all experts (the max of the experts' input_scales: gate and up together, down
// alone); each expert's gate and up requantized to the max of their two weight scales. The
// router stays unquantized. A layer's experts are all FP8 or all not; an FP8 weight whose
// scale is missing is an error naming the tensor.
//
// Online FP8 (`--quantization fp8` of a BF16 checkpoint, vLLM's Fp8MoEMethod on an
// unquantized checkpoint): each expert's merged gate/up rows get one scale and its down rows
// another, amax / 448, quantized at load as QuantFp8Static does (either layout); the
// activations are quantized per token at run time as the online-FP8 linears quantize theirs
// (QuantFp8PerTokenGroup, G = H, then MoeExpertsFp8PerToken, which quantizes each (token,
// expert) SiLU-mul row with its own scale). The router and the shared expert's gate stay as
// stored; the shared expert's projections are linears, quantized like any other.
//
// Block FP8 (`quant_method: fp8`, `weight_block_size: [bn, bk]`, dynamic activations: the
// Qwen3-*-A3B-FP8 releases; vLLM's Fp8MoEMethod with block_quant) and compressed-tensors
// per-channel weights with dynamic per-token activations (vLLM's
// CompressedTensorsW8A8Fp8MoEMethod): per expert, `{gate,up,down}_proj.weight` F8E4M3 with
// `weight_scale_inv` [ceil(N/bn), ceil(K/bk)] (block) or `weight_scale` [N, 1] (per channel),
// F32 or BF16, each finite and > 0. Nothing is requantized: the stacked scales keep each
// expert's gate scale rows then its up scale rows, then its down scale rows
// (MoeExpertsFp8GroupScaled's layout; per-channel as bn = 1 with one group per row). The
// activations are quantized at run time as the dense linears of the format quantize theirs
// (QuantFp8PerTokenGroup, G = bk or the whole row), and each (token, expert) SiLU-mul row
// likewise inside the op (the fused layout: below). Tensor
// parallelism: block FP8 when this rank's part of I is a whole number of bn rows and of bk
// columns (vLLM refuses the other splits as well); per-channel is refused, as online FP8 is
// (its down input's per-token scale spans the whole intermediate row).
// Block FP8 experts in transformers 5's fused layout (its fine-grained FP8 experts:
// `experts.gate_up_proj` / `experts.down_proj` F8E4M3 with `experts.gate_up_proj_scale_inv`
// [E, ceil(2I/bn), ceil(H/bk)] over the merged rows and `experts.down_proj_scale_inv`) load
// too (per-row scales where gate and up share a block); fused per-channel FP8 experts have no
// defined scale names and are refused by name.
//
// Tensor parallelism (vLLM's FusedMoE without expert parallelism): every rank keeps all E
// experts but only its block of each expert's intermediate dimension, i0 = rank * I / N: gate
// and up rows [i0, i0 + I/N) and the same columns of down; the stacked weights are then
// [E * 2I/N, H] and [E * H, I/N]. The router and the shared expert's gate are replicated (every
// rank routes and gates identically); the shared expert is split as a dense GatedMlp. Forward's
// `out` is then this rank's part of the sum the caller all-reduces: the sigmoid gate is a
// per-token factor common to every rank, so Σ_r (moe_r + g·shared_r) = moe + g·shared. FP8
// scales are the unsplit block's (each expert's requantized gate/up and its input scales are
// taken over whole experts before slicing), so each rank's FP8 bytes are the unsplit ones.
// Online FP8 is refused: its down input is scaled per token over the whole intermediate row.
//
// Calibration (`vtllm quantize`, a LinearInputObserver in the context): each call shows the
// observer every routed expert's input amax (LinearInputObserver::ObserveExperts).
#pragma once

#include <string>

#include "model/layers/activation_buffers.h"
#include "model/layers/linear.h"
#include "model/layers/mlp.h"

namespace vtllm::model {

struct MoeHostWeights;  // moe.cpp

struct MoeShape {
  int64_t hidden = 0, intermediate = 0, num_experts = 0, top_k = 0;
  bool norm_topk_prob = false;
  int64_t shared_intermediate = 0;  // 0: no shared expert
};

class SparseMoeBlock {
 public:
  SparseMoeBlock() = default;
  // Loads `prefix`gate and `prefix`experts.*, e.g. prefix "model.layers.3.mlp."; with
  // tp.size > 1 this rank's block of every expert (see above).
  static SparseMoeBlock Load(const LinearContext& lc, const std::string& prefix, const MoeShape& shape,
                             const TensorParallel& tp = {});

  // x: the normed input [T, H] (F32 or BF16, the activation dtype); out: [T, H] (with tensor
  // parallelism this rank's partial sum). x8: for static FP8 experts (takes_quantized_input),
  // x already quantized with input_scale() (QuantFp8Static's bytes, e.g. from the fused
  // RMSNorm that made x); without it Forward quantizes x itself.
  // x_scales: for group-scaled FP8 experts (input_group_quant), x8 and x_scales already
  // quantized as input_group_quant() says (e.g. by the fused RMSNorm that made x).
  void Forward(const vt::Queue& q, const vt::Tensor& x, const vt::Tensor& out, ActivationBuffers& buffers,
               const vt::Tensor* x8 = nullptr, const vt::Tensor* x_scales = nullptr) const;
  // Group-scaled FP8 experts: the per-token-group quantization of their input (nullopt for
  // other experts, and while an observer must see the unquantized input).
  std::optional<Fp8GroupQuant> input_group_quant() const {
    if (!group_scaled_ || observer_ != nullptr) return std::nullopt;
    return Fp8GroupQuant{block_k_, amax_floor_, scale_floor_};
  }
  bool takes_quantized_input() const { return fp8_ && !per_token_ && !group_scaled_; }
  float input_scale() const { return gate_up_input_scale_; }

  bool fp8() const { return fp8_; }
  // FP8 experts with per-token activation scales (online FP8), not static ones.
  bool fp8_per_token() const { return per_token_; }
  // FP8 experts with block or per-channel weight scales and per-token(-group) activations.
  bool fp8_group_scaled() const { return group_scaled_; }
  int64_t weight_bytes() const;         // router and every expert
  int64_t active_weight_bytes() const;  // what one token reads: the router and top_k experts

 private:
  static void ReadPerExpert(const LinearContext& lc, const std::string& prefix, const MoeShape& shape,
                            SparseMoeBlock& m, MoeHostWeights& out);
  // Block / per-channel FP8 experts (moe_group_scaled.cpp): reads, slices (tp) and places them.
  static void LoadGroupScaled(const LinearContext& lc, const std::string& prefix, const TensorParallel& tp,
                              SparseMoeBlock& m);
  static void LoadGroupScaledFused(const LinearContext& lc, const std::string& prefix, const TensorParallel& tp,
                                   SparseMoeBlock& m);
  void ForwardGroupScaled(const vt::Queue& q, const vt::Tensor& x, const vt::Tensor& out, const vt::Tensor& ids,
                          const vt::Tensor& weights, ActivationBuffers& buffers, const vt::Tensor* given_x8,
                          const vt::Tensor* given_x_scales) const;
  void ObserveExpertInputs(const vt::Queue& q, const vt::Tensor& x, const vt::Tensor& ids) const;
  // One expert's weight bytes, with its share of the block / per-channel scales.
  int64_t ExpertBytes() const {
    const int64_t scales = group_scaled_ ? static_cast<int64_t>(s_gate_up_.nbytes() + s_down_.nbytes()) / s_.num_experts : 0;
    return 3 * s_.hidden * s_.intermediate * static_cast<int64_t>(vt::DTypeSize(w_down_.dtype())) + scales;
  }

  MoeShape s_;  // intermediate: this rank's part of each expert's
  bool fp8_ = false, per_token_ = false, group_scaled_ = false;
  // Group-scaled FP8: MoeExpertsFp8GroupScaled's scales and blocks, and the activations' floors.
  vt::Tensor s_gate_up_, s_down_;
  int64_t block_n_ = 0, block_k_ = 0;
  float amax_floor_ = 0.0f, scale_floor_ = 0.0f;
  vt::Tensor router_;            // [E, H]
  GatedMlp shared_;               // when s_.shared_intermediate > 0
  vt::Tensor shared_gate_;        // [1, H]
  vt::Tensor w_gate_up_, w_down_;  // stacked experts
  // Static FP8: per-expert input_scale * weight_scale, and the shared input scales. FP8 per
  // token: per-expert weight scales (the activations' scales come with each call).
  vt::Tensor alpha_gate_up_, alpha_down_;
  float gate_up_input_scale_ = 1.0f, down_input_scale_ = 1.0f;
  LinearInputObserver* observer_ = nullptr;  // calibration only
  bool fuse_quant_ = true;                   // LinearContext::fuse_quant (the shared expert's MLP)
  std::string prefix_;                       // kept for observer_ only
};

}  // namespace vtllm::model
