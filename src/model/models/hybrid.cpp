#include "model/models/hybrid.h"

#include <string>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/layers/activation_buffers.h"
#include "model/layers/gated_attention.h"
#include "model/layers/gated_deltanet.h"
#include "model/layers/mlp.h"
#include "model/layers/moe.h"
#include "model/progress.h"
#include "vt/error.h"
#include "vt/ops/embedding.h"
#include "vt/ops/norm.h"

namespace vtllm::model {

std::vector<vt::OpId> HybridDecoderOps(const QuantConfig& quant, vt::DType act) {
  (void)act;
  using vt::OpId;
  std::vector<OpId> ops = {OpId::kEmbedding,      OpId::kRmsNormZeroCentred, OpId::kQkNormRopeCacheWrite,
                           OpId::kPagedAttention, OpId::kMatmul,             OpId::kSiluMul,
                           OpId::kSigmoidGatedAdd, OpId::kCausalConv1d,      OpId::kGatedDeltaRule,
                           OpId::kRmsNormGated,   OpId::kMoeTopKRouting,     OpId::kMoeExperts};
  if (quant.method == QuantMethod::kFp8Static) {
    ops.push_back(OpId::kMatmulFp8);
    ops.push_back(OpId::kQuantFp8Static);
    ops.push_back(OpId::kMoeExpertsFp8);
  }
  if (quant.method == QuantMethod::kFp8Block || quant.method == QuantMethod::kFp8ChannelToken) {
    ops.push_back(OpId::kQuantFp8PerTokenGroup);
    ops.push_back(OpId::kMatmulFp8GroupScaled);
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
  bool sparse = false;
  GatedMlp mlp;
  SparseMoeBlock moe;
};

class HybridDecoder final : public CausalLM {
 public:
  explicit HybridDecoder(const BuildContext& ctx) : cfg_(*ctx.config), buffers_(ctx.linear.device) {
    const Checkpoint& ckpt = *ctx.linear.checkpoint;
    device_ = ctx.linear.device;
    act_ = ctx.act_dtype;
    kv_ = ctx.kv_dtype;
    H_ = cfg_.hidden_size;
    V_ = cfg_.vocab_size;
    eps_ = static_cast<float>(cfg_.rms_norm_eps);
    VT_CHECK(cfg_.IsHybrid() && static_cast<int64_t>(cfg_.layer_types.size()) == cfg_.num_hidden_layers,
             cfg_.architecture, ": the config has no layer_types for its ", cfg_.num_hidden_layers, " layers");
    VT_CHECK(cfg_.hidden_act == "silu" || cfg_.hidden_act == "swish", cfg_.architecture, ": hidden_act \"",
             cfg_.hidden_act, "\" is not implemented (the MLP and the gated norm use silu)");
    const std::string root = ckpt.Has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";

    embed_ = LoadFloatWeight(ckpt, root + "embed_tokens.weight", {V_, H_}, device_);
    if (ctx.progress) ctx.progress->Advance(ckpt.Info(root + "embed_tokens.weight").nbytes());

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
      L.sparse = cfg_.IsSparseLayer(l);
      if (L.sparse) {
        L.moe = SparseMoeBlock::Load(lc, p + "mlp.",
                                     {.hidden = H_, .intermediate = cfg_.moe_intermediate_size,
                                      .num_experts = cfg_.num_experts, .top_k = cfg_.num_experts_per_tok,
                                      .norm_topk_prob = cfg_.norm_topk_prob,
                                      .shared_intermediate = cfg_.shared_expert_intermediate_size});
      } else {
        L.mlp = GatedMlp::Load(lc, p + "mlp.", H_, cfg_.intermediate_size);
      }
      layers_.push_back(std::move(L));
      if (ctx.progress) ctx.progress->Advance(ckpt.prefix_bytes(p));
    }
    VT_CHECK(num_attn_ > 0, cfg_.architecture, ": layer_types has no full_attention layer (",
             cfg_.num_hidden_layers, " linear_attention layers); not supported");
    final_norm_ = LoadFloatWeight(ckpt, root + "norm.weight", {H_}, device_);
    const bool tied = cfg_.tie_word_embeddings || !ckpt.Has("lm_head.weight");
    const std::string head = tied ? root + "embed_tokens" : "lm_head";
    QuantConfig none;
    LinearContext head_ctx = lc;
    const bool head_fp8 = !tied && ckpt.Info("lm_head.weight").dtype == DType::kF8E4M3;
    if (!head_fp8) head_ctx.quant = &none;
    lm_head_ = Linear::Load(head_ctx, {{head, V_}}, H_, false);
    if (ctx.progress && !tied) ctx.progress->Advance(ckpt.Info("lm_head.weight").nbytes());
    if (ctx.progress) ctx.progress->Advance(ckpt.Info(root + "norm.weight").nbytes());
  }

  int64_t weight_bytes() const override {
    int64_t b = static_cast<int64_t>(final_norm_.nbytes()) + lm_head_.weight_bytes();
    for (const HybridLayer& L : layers_)
      b += static_cast<int64_t>(L.input_norm.nbytes() + L.post_norm.nbytes()) +
           (L.linear ? L.gdn.weight_bytes() : L.attn.weight_bytes()) +
           (L.sparse ? L.moe.active_weight_bytes() : L.mlp.weight_bytes());
    return b;
  }

  KvCacheSpec CacheSpec(int64_t num_blocks, int64_t block_size, vt::Device device) const override {
    KvCacheSpec s;
    s.num_layers = num_attn_;
    s.num_kv_heads = cfg_.num_key_value_heads;
    s.head_dim = cfg_.head_dim;
    s.block_size = block_size;
    s.num_blocks = num_blocks;
    s.dtype = kv_;
    s.device = device;
    return s;
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
    Tensor residual = buffers_.Get(kSlotResidual, T, H_, act_), hidden = buffers_.Get(kSlotHidden, T, H_, act_);
    Tensor normed = buffers_.Get(kSlotNormed, T, H_, act_);
    Tensor mixed = buffers_.Get(kSlotAttnOut, T, H_, act_);

    vt::Embedding(q, residual, embed_, ids);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const HybridLayer& L = layers_[l];
      const Tensor& x = l == 0 ? residual : hidden;
      const Tensor* res = l == 0 ? nullptr : &residual;
      vt::RmsNormZeroCentred(q, normed, x, L.input_norm, eps_, res);
      if (L.linear)
        L.gdn.Forward(q, normed, m.query_start_loc, m.state_slots, cache.state(L.cache_index), mixed, buffers_);
      else
        L.attn.Forward(q, normed, m, cache.key(L.cache_index), cache.value(L.cache_index), rope_cache_, mixed,
                       buffers_);
      vt::RmsNormZeroCentred(q, normed, mixed, L.post_norm, eps_, &residual);
      if (L.sparse)
        L.moe.Forward(q, normed, hidden, buffers_);
      else
        L.mlp.Forward(q, normed, hidden, false, buffers_);
    }
    vt::RmsNormZeroCentred(q, normed, hidden, final_norm_, eps_, &residual);
    Tensor rows = normed;
    if (logit_rows.defined()) {
      rows = buffers_.Get(kSlotRows, logit_rows.dim(0), H_, act_);
      vt::Embedding(q, rows, normed, logit_rows);  // a row gather
    }
    lm_head_.Apply(q, rows, logits);
  }

 private:
  ModelConfig cfg_;
  vt::Device device_;
  DType act_ = DType::kBF16;
  DType kv_ = DType::kBF16;  // the KV cache's dtype
  int64_t H_ = 0, V_ = 0, num_attn_ = 0, num_gdn_ = 0;
  float eps_ = 1e-6f;
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
