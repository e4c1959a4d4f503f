#include "model/models/decoder.h"

#include <string>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/layers/activation_buffers.h"
#include "model/layers/attention.h"
#include "model/layers/rotary.h"
#include "model/models/decoder_parts.h"
#include "model/progress.h"
#include "model/quant_config.h"
#include "vt/error.h"
#include "vt/ops/embedding.h"
#include "vt/ops/fused.h"
#include "vt/ops/norm.h"
#include "vt/registry.h"

namespace vtllm::model {

std::vector<vt::OpId> DecoderOps(const QuantConfig& quant, vt::DType act) {
  using vt::OpId;
  std::vector<OpId> ops = {OpId::kEmbedding, OpId::kRmsNorm, OpId::kQkNormRopeCacheWrite, OpId::kPagedAttention};
  for (OpId op : LinearOps(quant)) ops.push_back(op);
  ops.push_back(OpId::kSiluMul);
  if (quant.method == QuantMethod::kFp8Static && act == vt::DType::kBF16) {  // the fused recipes serve BF16
    ops.push_back(OpId::kRmsNormQuantFp8);
    ops.push_back(OpId::kSiluMulQuantFp8);
    ops.push_back(OpId::kPagedAttentionQuantFp8);
  }
  return ops;
}

std::vector<vt::OpId> MoeDecoderOps(const QuantConfig& quant, vt::DType act) {
  std::vector<vt::OpId> ops = DecoderOps(quant, act);
  for (vt::OpId op : MoeBlockOps(quant)) ops.push_back(op);
  return ops;
}

namespace {

using vt::DType;
using vt::Tensor;

struct Layer {
  Tensor input_norm, post_norm;
  Attention attn;
  FeedForward ff;
};

class Decoder final : public CausalLM {
 public:
  Decoder(const BuildContext& ctx, const DecoderOptions& opt) : cfg_(*ctx.config), buffers_(ctx.linear.device) {
    const Checkpoint& ckpt = *ctx.linear.checkpoint;
    device_ = ctx.linear.device;
    act_ = ctx.act_dtype;
    kv_ = ctx.kv_dtype;
    H_ = cfg_.hidden_size;
    Hk_ = cfg_.num_key_value_heads;
    D_ = cfg_.head_dim;
    VT_CHECK(Hk_ > 0 && cfg_.num_attention_heads % Hk_ == 0, cfg_.architecture, ": num_attention_heads ",
             cfg_.num_attention_heads, " must be a multiple of num_key_value_heads ", Hk_);
    tp_ = ctx.tp;
    comm_ = ctx.tp.size > 1 ? ctx.comm : nullptr;
    VT_CHECK(tp_.size == 1 || (comm_ != nullptr && comm_->size() == tp_.size && comm_->rank() == tp_.rank),
             cfg_.architecture, ": tensor-parallel rank ", tp_.rank, " of ", tp_.size, " needs its group's communicator");
    Hk_ = ShardHeads(cfg_.num_attention_heads, Hk_, tp_).num_kv;  // this rank's KV heads (its cache)
    VT_CHECK(cfg_.hidden_act == "silu" || cfg_.hidden_act == "swish", cfg_.architecture, ": hidden_act \"",
             cfg_.hidden_act, "\" is not implemented (the MLP supports silu)");
    eps_ = static_cast<float>(cfg_.rms_norm_eps);
    // The fused norm/activation + FP8 recipes round to BF16 before quantizing, which is
    // exactly the unfused BF16 model's arithmetic; an F32 model quantizes its F32 values
    // directly, so it runs the steps unfused.
    fuse_quant_ = act_ == DType::kBF16 && ctx.linear.fuse_quant;

    embed_ = LoadEmbedding(ctx, "model.");
    RopeParams rope;
    rope.head_dim = D_;
    rope.theta = cfg_.rope_theta;
    rope.scaling_type = cfg_.rope_scaling.type;
    rope.factor = cfg_.rope_scaling.factor;
    rope.low_freq_factor = cfg_.rope_scaling.low_freq_factor;
    rope.high_freq_factor = cfg_.rope_scaling.high_freq_factor;
    rope.original_max_position_embeddings = cfg_.rope_scaling.original_max_position_embeddings;
    rope_cache_ = BuildRopeCache(rope, cfg_.max_position_embeddings, device_);

    AttentionShape as;
    as.hidden = H_;
    as.num_heads = cfg_.num_attention_heads;
    as.num_kv_heads = cfg_.num_key_value_heads;  // the whole layer's; Attention::Load keeps this rank's
    as.head_dim = D_;
    as.qk_norm = opt.qk_norm;
    as.qkv_bias = opt.qkv_bias;
    as.rms_eps = eps_;
    as.fp8_kv_cache = kv_ == DType::kF8E4M3;
    const LinearContext& lc = ctx.linear;
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      Layer L;
      L.input_norm = LoadFloatWeight(ckpt, p + "input_layernorm.weight", {H_}, device_);
      L.post_norm = LoadFloatWeight(ckpt, p + "post_attention_layernorm.weight", {H_}, device_);
      L.attn = Attention::Load(lc, p + "self_attn.", as, tp_);
      L.ff = FeedForward::Load(lc, p + "mlp.", cfg_, l, tp_);
      layers_.push_back(std::move(L));
      if (ctx.progress) ctx.progress->Advance(ckpt.prefix_bytes(p));
    }
    final_norm_ = LoadFloatWeight(ckpt, "model.norm.weight", {H_}, device_);
    lm_head_ = LoadLmHead(ctx, "model.");
  }

  int64_t weight_bytes() const override {
    int64_t b = static_cast<int64_t>(final_norm_.nbytes()) + lm_head_.weight_bytes();
    for (const Layer& L : layers_)
      b += static_cast<int64_t>(L.input_norm.nbytes() + L.post_norm.nbytes()) + L.attn.weight_bytes() +
           L.ff.weight_bytes();
    // The embedding table is gathered (one row per token), not read whole; a MoE layer
    // counts what one token reads (the router and its top-k experts).
    return b;
  }

  KvCacheSpec CacheSpec(int64_t num_blocks, int64_t block_size, vt::Device device) const override {
    return AttentionCacheSpec(static_cast<int64_t>(layers_.size()), Hk_, D_, num_blocks, block_size, kv_, device);
  }

  // ids [T] -> embedding -> N x [norm -> attention -> norm -> MLP] (residual stream) -> final
  // norm -> the wanted rows -> lm_head -> logits [R, V].
  void Forward(const vt::Queue& q, const Tensor& ids, const AttentionMetadata& m, const KvCacheTensors& cache,
               const Tensor& logit_rows, const Tensor& logits) override {
    const int64_t T = ids.dim(0);
    VT_CHECK(m.num_tokens == T, "Forward: ", T, " token ids but the attention metadata has ", m.num_tokens);
    VT_CHECK(cache.spec().dtype == kv_ && cache.spec().num_layers == static_cast<int64_t>(layers_.size()),
             "Forward: the KV cache (", cache.spec().num_layers, " layers of ", vt::DTypeName(cache.spec().dtype),
             ") does not match the model (", layers_.size(), " layers of ", vt::DTypeName(kv_), ")");
    const ResidualStream rs(buffers_, T, H_, act_);
    const Tensor &residual = rs.residual, &hidden = rs.hidden, &normed = rs.normed, &attn_out = rs.mixed;

    vt::Embedding(q, residual, embed_, ids);
    if (comm_) comm_->AllReduceSum(q, residual);  // vocabulary-parallel: one rank's row, zeros elsewhere
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      const LinearInput attn_in = NormForLinear(q, L.attn.qkv(), rs.Input(l), L.input_norm, eps_, false, rs.AddTo(l),
                                                normed, fuse_quant_, buffers_);
      L.attn.Forward(q, attn_in, m, cache.key(static_cast<int64_t>(l)), cache.value(static_cast<int64_t>(l)),
                     rope_cache_, attn_out, buffers_, fuse_quant_);
      if (comm_) comm_->AllReduceSum(q, attn_out);  // row-parallel o_proj: the ranks' parts summed
      // A sparse block's router reads the normed activations; its FP8 experts take them
      // quantized by the same op where they can.
      NormThenFeedForward(q, L.ff, attn_out, L.post_norm, eps_, false, &residual, normed, hidden, fuse_quant_,
                          buffers_);
      // Row-parallel down_proj, or each rank's block of every expert (and shared expert).
      if (comm_) comm_->AllReduceSum(q, hidden);
    }
    vt::RmsNorm(q, normed, hidden, final_norm_, eps_, &residual);
    ApplyLmHead(q, lm_head_, normed, logit_rows, logits, buffers_, comm_);
  }

 private:
  ModelConfig cfg_;
  vt::Device device_;
  DType act_ = DType::kBF16;
  DType kv_ = DType::kBF16;  // the KV cache's dtype
  int64_t H_ = 0, Hk_ = 0, D_ = 0;  // Hk_: this rank's KV heads
  TensorParallel tp_;
  vt::Communicator* comm_ = nullptr;  // tensor parallelism (tp_.size > 1) only
  float eps_ = 1e-6f;
  bool fuse_quant_ = true;
  Tensor embed_, final_norm_, rope_cache_;
  std::vector<Layer> layers_;
  Linear lm_head_;
  ActivationBuffers buffers_;
};

}  // namespace

std::unique_ptr<CausalLM> MakeDecoder(const BuildContext& ctx, const DecoderOptions& options) {
  return std::make_unique<Decoder>(ctx, options);
}

}  // namespace vtllm::model
