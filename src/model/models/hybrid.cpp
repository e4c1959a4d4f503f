#include "model/models/hybrid.h"

#include <string>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/layers/activation_buffers.h"
#include "model/layers/gated_attention.h"
#include "model/layers/gated_deltanet.h"
#include "model/models/decoder_parts.h"
#include "model/progress.h"
#include "vt/error.h"
#include "vt/ops/embedding.h"
#include "vt/ops/norm.h"

namespace vtllm::model {

std::vector<vt::OpId> HybridDecoderOps(const QuantConfig& quant, vt::DType act) {
  using vt::OpId;
  std::vector<OpId> ops = {OpId::kEmbedding,     OpId::kRmsNormZeroCentred, OpId::kQkNormRopeCacheWrite,
                           OpId::kPagedAttention, OpId::kSiluMul,           OpId::kCausalConv1d,
                           OpId::kGatedDeltaRule, OpId::kRmsNormGated};
  for (OpId op : LinearOps(quant)) ops.push_back(op);
  for (OpId op : MoeBlockOps(quant)) ops.push_back(op);  // kSigmoidGatedAdd: also the attention's output gate
  // Static FP8 with BF16 activations: a static-FP8 MLP's SiLU-mul fused with the down
  // projection's quantization, where the gate/up linear cannot do it in its own op
  // (GatedMlp::Forward); the zero-centred norms fused with the static FP8 input quantization
  // of the token mixer's projections and of the experts (or MLP); a GDN layer's gated norm
  // fused with out_proj's (GatedDeltaNet::Forward).
  if (quant.method == QuantMethod::kFp8Static && act == vt::DType::kBF16) {
    ops.push_back(OpId::kSiluMulQuantFp8);
    ops.push_back(OpId::kRmsNormZeroCentredQuantFp8);
    ops.push_back(OpId::kRmsNormGatedQuantFp8);
  }
  return ops;
}

namespace {

using vt::DType;
using vt::Tensor;

struct HybridLayer {
  Tensor input_norm, post_norm;  // zero-centred
  bool linear = false;           // a GatedDeltaNet layer, else gated full attention
  int64_t cache_index = 0;       // among the layers of its kind (KV cache layer or state layer)
  GatedDeltaNet gdn;
  GatedAttention attn;
  FeedForward ff;
};

class HybridDecoder final : public CausalLM {
 public:
  explicit HybridDecoder(const BuildContext& ctx) : cfg_(*ctx.config), buffers_(ctx.linear.device) {
    const Checkpoint& ckpt = *ctx.linear.checkpoint;
    device_ = ctx.linear.device;
    act_ = ctx.act_dtype;
    kv_ = ctx.kv_dtype;
    H_ = cfg_.hidden_size;
    eps_ = static_cast<float>(cfg_.rms_norm_eps);
    // The fused norm/activation + FP8 recipes round to BF16 before quantizing, as the unfused
    // BF16 model does; an F32 model runs the steps apart (see decoder.cpp).
    fuse_quant_ = act_ == DType::kBF16 && ctx.linear.fuse_quant;
    VT_CHECK(cfg_.IsHybrid() && static_cast<int64_t>(cfg_.layer_types.size()) == cfg_.num_hidden_layers,
             cfg_.architecture, ": the config has no layer_types for its ", cfg_.num_hidden_layers, " layers");
    VT_CHECK(cfg_.hidden_act == "silu" || cfg_.hidden_act == "swish", cfg_.architecture, ": hidden_act \"",
             cfg_.hidden_act, "\" is not implemented (the MLP and the gated norm use silu)");
    const std::string root = ckpt.Has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";

    embed_ = LoadEmbedding(ctx, root);

    attn_shape_.hidden = H_;
    attn_shape_.num_heads = cfg_.num_attention_heads;
    attn_shape_.num_kv_heads = cfg_.num_key_value_heads;
    attn_shape_.head_dim = cfg_.head_dim;
    attn_shape_.rotary_dim =
        static_cast<int64_t>(cfg_.partial_rotary_factor * static_cast<double>(cfg_.head_dim) + 0.5);
    attn_shape_.output_gate = cfg_.attn_output_gate;
    attn_shape_.rms_eps = eps_;
    attn_shape_.fp8_kv_cache = kv_ == DType::kF8E4M3;
    VT_CHECK(cfg_.rope_scaling.type == "default", cfg_.architecture, ": rope type \"", cfg_.rope_scaling.type,
             "\" is not supported for hybrid models yet (supported: default)");
    rope_cache_ = GatedAttention::BuildRopeCache(attn_shape_, cfg_.rope_theta, cfg_.max_position_embeddings, device_);

    gdn_shape_.hidden = H_;
    gdn_shape_.num_key_heads = cfg_.linear_num_key_heads;
    gdn_shape_.num_value_heads = cfg_.linear_num_value_heads;
    gdn_shape_.key_head_dim = cfg_.linear_key_head_dim;
    gdn_shape_.value_head_dim = cfg_.linear_value_head_dim;
    gdn_shape_.conv_kernel = cfg_.linear_conv_kernel_dim;
    gdn_shape_.fused_projections = cfg_.architecture == "Qwen3NextForCausalLM";
    gdn_shape_.rms_eps = eps_;

    const LinearContext& lc = ctx.linear;
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
      const std::string p = root + "layers." + std::to_string(l) + ".";
      HybridLayer L;
      L.input_norm = LoadFloatWeight(ckpt, p + "input_layernorm.weight", {H_}, device_);
      L.post_norm = LoadFloatWeight(ckpt, p + "post_attention_layernorm.weight", {H_}, device_);
      L.linear = cfg_.IsLinearAttentionLayer(l);
      if (L.linear) {
        L.cache_index = num_gdn_++;
        L.gdn = GatedDeltaNet::Load(lc, p + "linear_attn.", gdn_shape_);
      } else {
        L.cache_index = num_attn_++;
        L.attn = GatedAttention::Load(lc, p + "self_attn.", attn_shape_);
      }
      L.ff = FeedForward::Load(lc, p + "mlp.", cfg_, l);
      layers_.push_back(std::move(L));
      if (ctx.progress) ctx.progress->Advance(ckpt.prefix_bytes(p));
    }
    VT_CHECK(num_attn_ > 0, cfg_.architecture, ": layer_types has no full_attention layer (",
             cfg_.num_hidden_layers, " linear_attention layers); not supported");
    final_norm_ = LoadFloatWeight(ckpt, root + "norm.weight", {H_}, device_);
    lm_head_ = LoadLmHead(ctx, root);
  }

  int64_t weight_bytes() const override {
    int64_t b = static_cast<int64_t>(final_norm_.nbytes()) + lm_head_.weight_bytes();
    for (const HybridLayer& L : layers_)
      b += static_cast<int64_t>(L.input_norm.nbytes() + L.post_norm.nbytes()) +
           (L.linear ? L.gdn.weight_bytes() : L.attn.weight_bytes()) + L.ff.weight_bytes();
    return b;
  }

  KvCacheSpec CacheSpec(int64_t num_blocks, int64_t block_size, vt::Device device) const override {
    return AttentionCacheSpec(num_attn_, cfg_.num_key_value_heads, cfg_.head_dim, num_blocks, block_size, kv_, device);
  }

  StateSpec StateCacheSpec(int64_t num_slots) const override {
    StateSpec s;
    s.num_layers = num_gdn_;
    s.num_slots = num_slots;
    s.key_channels = gdn_shape_.num_key_heads * gdn_shape_.key_head_dim;
    s.value_channels = gdn_shape_.num_value_heads * gdn_shape_.value_head_dim;
    s.conv_width = gdn_shape_.conv_kernel - 1;
    s.num_value_heads = gdn_shape_.num_value_heads;
    s.key_head_dim = gdn_shape_.key_head_dim;
    s.value_head_dim = gdn_shape_.value_head_dim;
    s.conv_dtype = act_;
    return s;
  }

  void Forward(const vt::Queue& q, const Tensor& ids, const AttentionMetadata& m, const KvCacheTensors& cache,
               const Tensor& logit_rows, const Tensor& logits) override {
    const int64_t T = ids.dim(0);
    VT_CHECK(m.num_tokens == T, "Forward: ", T, " token ids but the attention metadata has ", m.num_tokens);
    VT_CHECK(cache.spec().dtype == kv_ && cache.spec().num_layers == num_attn_ &&
                 cache.spec().state.num_layers == num_gdn_ && cache.spec().state.conv_dtype == act_,
             "Forward: the cache (", cache.spec().num_layers, " attention layers, ", cache.spec().state.num_layers,
             " state layers of ", vt::DTypeName(cache.spec().dtype), ") does not match the model (", num_attn_, " and ",
             num_gdn_, " of ", vt::DTypeName(kv_), ")");
    VT_CHECK(m.state_slots.defined(), "Forward: ", cfg_.architecture, " needs each sequence's state slot");
    const ResidualStream rs(buffers_, T, H_, act_);
    const Tensor &residual = rs.residual, &hidden = rs.hidden, &normed = rs.normed, &mixed = rs.mixed;

    vt::Embedding(q, residual, embed_, ids);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const HybridLayer& L = layers_[l];
      // The input norm fused with the one quantization that the token mixer's projections
      // share (BF16 activations): a GDN layer's q/k/v/z (the BF16 norm is written too, for
      // in_proj_b / in_proj_a), an attention layer's q/k/v/gate.
      const SharedInputQuant iq =
          !fuse_quant_ ? SharedInputQuant{} : L.linear ? L.gdn.input_quant() : L.attn.input_quant();
      const LinearInput in = NormForInput(q, rs.Input(l), L.input_norm, eps_, true, rs.AddTo(l), normed,
                                          iq.input_scale, iq.group, L.linear ? &normed : nullptr, buffers_);
      const LinearInput* quantized = in.x.dtype() == DType::kF8E4M3 ? &in : nullptr;
      if (L.linear)
        L.gdn.Forward(q, normed, m.query_start_loc, m.state_slots, cache.state(L.cache_index), mixed, buffers_,
                      fuse_quant_, quantized);
      else
        L.attn.Forward(q, normed, m, cache.key(L.cache_index), cache.value(L.cache_index), rope_cache_, mixed,
                       buffers_, quantized);
      NormThenFeedForward(q, L.ff, mixed, L.post_norm, eps_, true, &residual, normed, hidden, fuse_quant_, buffers_);
    }
    vt::RmsNormZeroCentred(q, normed, hidden, final_norm_, eps_, &residual);
    ApplyLmHead(q, lm_head_, normed, logit_rows, logits, buffers_);
  }

 private:
  ModelConfig cfg_;
  vt::Device device_;
  DType act_ = DType::kBF16;
  DType kv_ = DType::kBF16;  // the KV cache's dtype
  int64_t H_ = 0, num_attn_ = 0, num_gdn_ = 0;
  float eps_ = 1e-6f;
  bool fuse_quant_ = true;
  GatedAttentionShape attn_shape_;
  GdnShape gdn_shape_;
  Tensor embed_, final_norm_, rope_cache_;
  std::vector<HybridLayer> layers_;
  Linear lm_head_;
  ActivationBuffers buffers_;
};

}  // namespace

std::unique_ptr<CausalLM> MakeHybridDecoder(const BuildContext& ctx) { return std::make_unique<HybridDecoder>(ctx); }

}  // namespace vtllm::model
