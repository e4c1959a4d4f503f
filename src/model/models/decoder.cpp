#include "model/models/decoder.h"

#include <cmath>
#include <string>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/layers/rotary.h"
#include "model/progress.h"
#include "model/quant_config.h"
#include "vt/error.h"
#include "vt/ops/activation.h"
#include "vt/ops/attention.h"
#include "vt/ops/embedding.h"
#include "vt/ops/fused.h"
#include "vt/ops/norm.h"
#include "vt/ops/rope.h"

namespace vtllm::model {

namespace {

using vt::DType;
using vt::Tensor;

// A float weight (norm weights, embeddings) of `shape` as stored (F32/BF16/F16), on the
// device, read-only.
Tensor LoadFloatWeight(const Checkpoint& ckpt, const std::string& name, const vt::Shape& shape, vt::Device device) {
  const DType dt = ckpt.Info(name).dtype;
  VT_CHECK(dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16, ckpt.FileOf(name), ": tensor '", name, "' is ",
           vt::DTypeName(dt), " but must be F32, BF16 or F16");
  return WeightOnDevice(ckpt.GetAs(name, dt, shape), device);
}

uint64_t PrefixBytes(const Checkpoint& ckpt, const std::string& prefix) {
  uint64_t bytes = 0;
  for (const std::string& n : ckpt.names())
    if (n.compare(0, prefix.size(), prefix) == 0) bytes += ckpt.Info(n).nbytes();
  return bytes;
}

struct Layer {
  Tensor input_norm, post_norm, q_norm, k_norm;
  Linear qkv, o_proj, gate_up, down;
};

// Activation buffers, allocated for the largest step seen and sliced to each step's rows,
// so a decode step allocates nothing.
class Buffers {
 public:
  Tensor Get(int slot, int64_t rows, int64_t cols, DType dtype, vt::Device device) {
    if (slots_.size() <= static_cast<size_t>(slot)) slots_.resize(static_cast<size_t>(slot) + 1);
    Tensor& t = slots_[static_cast<size_t>(slot)];
    if (!t.defined() || t.dim(0) < rows || t.dim(1) != cols || t.dtype() != dtype)
      t = Tensor::Empty({rows, cols}, dtype, device);
    return t.Slice(0, 0, rows);
  }

 private:
  std::vector<Tensor> slots_;
};

enum Slot {
  kQkv,
  kResidual,
  kHidden,
  kNormed,
  kX8,
  kQ,
  kK,
  kV,
  kQn,
  kKn,
  kAttn,
  kAttnOut,
  kGateUp,
  kAct,
  kAct8,
  kRows
};

class Decoder final : public CausalLM {
 public:
  Decoder(const BuildContext& ctx, const DecoderOptions& opt) : opt_(opt), cfg_(*ctx.config) {
    const Checkpoint& ckpt = *ctx.linear.checkpoint;
    device_ = ctx.linear.device;
    act_ = ctx.act_dtype;
    H_ = cfg_.hidden_size;
    Hq_ = cfg_.num_attention_heads;
    Hk_ = cfg_.num_key_value_heads;
    D_ = cfg_.head_dim;
    I_ = cfg_.intermediate_size;
    V_ = cfg_.vocab_size;
    VT_CHECK(Hk_ > 0 && Hq_ % Hk_ == 0, cfg_.architecture, ": num_attention_heads ", Hq_,
             " must be a multiple of num_key_value_heads ", Hk_);
    VT_CHECK(cfg_.hidden_act == "silu" || cfg_.hidden_act == "swish", cfg_.architecture, ": hidden_act \"",
             cfg_.hidden_act, "\" is not implemented (the MLP supports silu)");
    eps_ = static_cast<float>(cfg_.rms_norm_eps);
    // The fused norm/activation + FP8 recipes round to BF16 before quantizing, which is
    // exactly the unfused BF16 model's arithmetic; an F32 model quantizes its F32 values
    // directly, so it runs the steps unfused.
    fuse_quant_ = act_ == DType::kBF16;
    scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D_)));

    embed_ = LoadFloatWeight(ckpt, "model.embed_tokens.weight", {V_, H_}, device_);
    if (ctx.progress) ctx.progress->Advance(ckpt.Info("model.embed_tokens.weight").nbytes());
    RopeParams rope;
    rope.head_dim = D_;
    rope.theta = cfg_.rope_theta;
    rope.scaling_type = cfg_.rope_scaling.type;
    rope.factor = cfg_.rope_scaling.factor;
    rope.low_freq_factor = cfg_.rope_scaling.low_freq_factor;
    rope.high_freq_factor = cfg_.rope_scaling.high_freq_factor;
    rope.original_max_position_embeddings = cfg_.rope_scaling.original_max_position_embeddings;
    rope_cache_ = BuildRopeCache(rope, cfg_.max_position_embeddings, device_);

    const LinearContext& lc = ctx.linear;
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      Layer L;
      L.input_norm = LoadFloatWeight(ckpt, p + "input_layernorm.weight", {H_}, device_);
      L.post_norm = LoadFloatWeight(ckpt, p + "post_attention_layernorm.weight", {H_}, device_);
      if (opt_.qk_norm) {
        L.q_norm = LoadFloatWeight(ckpt, p + "self_attn.q_norm.weight", {D_}, device_);
        L.k_norm = LoadFloatWeight(ckpt, p + "self_attn.k_norm.weight", {D_}, device_);
      }
      L.qkv = Linear::Load(
          lc,
          {{p + "self_attn.q_proj", Hq_ * D_}, {p + "self_attn.k_proj", Hk_ * D_}, {p + "self_attn.v_proj", Hk_ * D_}},
          H_, opt_.qkv_bias);
      L.o_proj = Linear::Load(lc, {{p + "self_attn.o_proj", H_}}, Hq_ * D_, false);
      L.gate_up = Linear::Load(lc, {{p + "mlp.gate_proj", I_}, {p + "mlp.up_proj", I_}}, H_, false);
      L.down = Linear::Load(lc, {{p + "mlp.down_proj", H_}}, I_, false);
      layers_.push_back(std::move(L));
      if (ctx.progress) ctx.progress->Advance(PrefixBytes(ckpt, p));
    }
    final_norm_ = LoadFloatWeight(ckpt, "model.norm.weight", {H_}, device_);
    // lm_head stays unquantized unless the checkpoint stores it in FP8 and the config agrees.
    const bool tied = cfg_.tie_word_embeddings || !ckpt.Has("lm_head.weight");
    const std::string head = tied ? "model.embed_tokens" : "lm_head";
    QuantConfig none;
    LinearContext head_ctx = lc;
    const bool head_fp8 = !tied && ckpt.Info("lm_head.weight").dtype == DType::kF8E4M3;
    if (!head_fp8) head_ctx.quant = &none;
    lm_head_ = Linear::Load(head_ctx, {{head, V_}}, H_, false);
    if (ctx.progress && !tied) ctx.progress->Advance(ckpt.Info("lm_head.weight").nbytes());
    if (ctx.progress) ctx.progress->Advance(ckpt.Info("model.norm.weight").nbytes());
  }

  std::vector<vt::OpId> RequiredOps() const override {
    using vt::OpId;
    std::vector<OpId> ops = {OpId::kEmbedding, OpId::kRmsNorm, OpId::kRotaryEmbedding, OpId::kKvCacheWrite,
                             OpId::kPagedAttention};
    auto add = [&](OpId id) {
      for (OpId o : ops)
        if (o == id) return;
      ops.push_back(id);
    };
    auto linear_ops = [&](const Linear& lin) {
      if (lin.takes_quantized_input()) {
        add(OpId::kMatmulFp8);
        add(OpId::kQuantFp8Static);
      } else {
        add(OpId::kMatmul);
      }
    };
    for (const Layer& L : layers_) {
      for (const Linear* lin : {&L.qkv, &L.o_proj, &L.gate_up, &L.down}) linear_ops(*lin);
      if (fuse_quant_ && (L.qkv.takes_quantized_input() || L.gate_up.takes_quantized_input()))
        add(OpId::kRmsNormQuantFp8);
      add(fuse_quant_ && L.down.takes_quantized_input() ? OpId::kSiluMulQuantFp8 : OpId::kSiluMul);
    }
    linear_ops(lm_head_);
    return ops;
  }

  int64_t weight_bytes() const override {
    int64_t b = static_cast<int64_t>(final_norm_.nbytes()) + lm_head_.weight_bytes();
    for (const Layer& L : layers_) {
      b += static_cast<int64_t>(L.input_norm.nbytes() + L.post_norm.nbytes());
      if (L.q_norm.defined()) b += static_cast<int64_t>(L.q_norm.nbytes() + L.k_norm.nbytes());
      b += L.qkv.weight_bytes() + L.o_proj.weight_bytes() + L.gate_up.weight_bytes() + L.down.weight_bytes();
    }
    return b;  // the embedding table is gathered (one row per token), not read whole
  }

  KvCacheSpec CacheSpec(int64_t num_blocks, int64_t block_size, vt::Device device) const override {
    KvCacheSpec s;
    s.num_layers = static_cast<int64_t>(layers_.size());
    s.num_kv_heads = Hk_;
    s.head_dim = D_;
    s.block_size = block_size;
    s.num_blocks = num_blocks;
    s.dtype = act_;
    s.device = device;
    return s;
  }

  void Forward(const vt::Queue& q, const Tensor& ids, const AttentionMetadata& m, const KvCacheTensors& cache,
               const Tensor& logit_rows, const Tensor& logits) override {
    const int64_t T = ids.dim(0);
    VT_CHECK(m.num_tokens == T, "Forward: ", T, " token ids but the attention metadata has ", m.num_tokens);
    VT_CHECK(cache.spec().dtype == act_ && cache.spec().num_layers == static_cast<int64_t>(layers_.size()),
             "Forward: the KV cache (", cache.spec().num_layers, " layers of ", vt::DTypeName(cache.spec().dtype),
             ") does not match the model (", layers_.size(), " layers of ", vt::DTypeName(act_), ")");
    auto buf = [&](Slot s, int64_t rows, int64_t cols, DType dt) { return buffers_.Get(s, rows, cols, dt, device_); };
    Tensor residual = buf(kResidual, T, H_, act_), hidden = buf(kHidden, T, H_, act_);
    Tensor normed = buf(kNormed, T, H_, act_);
    Tensor qb = buf(kQ, T, Hq_ * D_, act_), kb = buf(kK, T, Hk_ * D_, act_), vb = buf(kV, T, Hk_ * D_, act_);
    Tensor attn = buf(kAttn, T, Hq_ * D_, act_), attn_out = buf(kAttnOut, T, H_, act_);
    Tensor gate_up = buf(kGateUp, T, 2 * I_, act_);

    vt::Embedding(q, residual, embed_, ids);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      // Layer 0 normalises the embeddings; later layers first add their input to the residual.
      const Tensor& x = l == 0 ? residual : hidden;
      const Tensor* res = l == 0 ? nullptr : &residual;
      const Tensor qkv_in = NormInto(q, L.qkv, x, L.input_norm, res, normed, T);
      Tensor qr, kr, vr;
      if (T == 1) {
        // One row: the shards' columns of a single output are contiguous views, so q/k/v
        // take one GEMV instead of three.
        Tensor qkv = buf(kQkv, 1, (Hq_ + 2 * Hk_) * D_, act_);
        L.qkv.Apply(q, qkv_in, qkv);
        qr = qkv.Slice(1, 0, Hq_ * D_);
        kr = qkv.Slice(1, Hq_ * D_, (Hq_ + Hk_) * D_);
        vr = qkv.Slice(1, (Hq_ + Hk_) * D_, (Hq_ + 2 * Hk_) * D_);
      } else {
        const Tensor outs[3] = {qb, kb, vb};
        L.qkv.ApplyShards(q, qkv_in, outs);
        qr = qb;
        kr = kb;
        vr = vb;
      }
      if (opt_.qk_norm) {
        const Tensor qn = buf(kQn, T, Hq_ * D_, act_), kn = buf(kKn, T, Hk_ * D_, act_);
        vt::RmsNorm(q, qn.View({T * Hq_, D_}), qr.View({T * Hq_, D_}), L.q_norm, eps_);
        vt::RmsNorm(q, kn.View({T * Hk_, D_}), kr.View({T * Hk_, D_}), L.k_norm, eps_);
        qr = qn;
        kr = kn;
      }
      vt::RotaryEmbedding(q, m.positions, qr, &kr, rope_cache_, D_);
      vt::KvCacheWrite(q, kr, vr, cache.key(static_cast<int64_t>(l)), cache.value(static_cast<int64_t>(l)),
                       m.slot_mapping);
      vt::PagedAttention(q, attn, qr, cache.key(static_cast<int64_t>(l)), cache.value(static_cast<int64_t>(l)),
                         m.block_tables, m.seq_lens, m.query_start_loc, scale_);
      L.o_proj.Apply(q, attn, attn_out);
      const Tensor mlp_in = NormInto(q, L.gate_up, attn_out, L.post_norm, &residual, normed, T);
      L.gate_up.Apply(q, mlp_in, gate_up);
      if (L.down.takes_quantized_input() && fuse_quant_) {
        Tensor act8 = buf(kAct8, T, I_, DType::kF8E4M3);
        vt::SiluMulQuantFp8(q, act8, gate_up, L.down.input_scale());
        L.down.Apply(q, act8, hidden);
      } else {
        Tensor act = buf(kAct, T, I_, act_);
        vt::SiluMul(q, act, gate_up);
        L.down.Apply(q, act, hidden);
      }
    }
    vt::RmsNorm(q, normed, hidden, final_norm_, eps_, &residual);
    Tensor rows = normed;
    if (logit_rows.defined()) {
      const int64_t R = logit_rows.dim(0);
      rows = buf(kRows, R, H_, act_);
      vt::Embedding(q, rows, normed, logit_rows);  // a row gather
    }
    lm_head_.Apply(q, rows, logits);
  }

 private:
  // RMSNorm of x (after adding it to `residual` when given) as the input of `next`: fused
  // with the FP8 quantization when `next` takes FP8 input and activations are BF16, else
  // into `normed` (and `next` quantizes it).
  Tensor NormInto(const vt::Queue& q, const Linear& next, const Tensor& x, const Tensor& weight, const Tensor* residual,
                  const Tensor& normed, int64_t T) {
    if (next.takes_quantized_input() && fuse_quant_) {
      Tensor x8 = buffers_.Get(kX8, T, H_, DType::kF8E4M3, device_);
      vt::RmsNormQuantFp8(q, x8, x, weight, eps_, next.input_scale(), residual);
      return x8;
    }
    vt::RmsNorm(q, normed, x, weight, eps_, residual);
    return normed;
  }

  DecoderOptions opt_;
  ModelConfig cfg_;
  vt::Device device_;
  DType act_ = DType::kBF16;
  int64_t H_ = 0, Hq_ = 0, Hk_ = 0, D_ = 0, I_ = 0, V_ = 0;
  float eps_ = 1e-6f, scale_ = 1.0f;
  bool fuse_quant_ = true;
  Tensor embed_, final_norm_, rope_cache_;
  std::vector<Layer> layers_;
  Linear lm_head_;
  Buffers buffers_;
};

}  // namespace

std::unique_ptr<CausalLM> MakeDecoder(const BuildContext& ctx, const DecoderOptions& options) {
  return std::make_unique<Decoder>(ctx, options);
}

}  // namespace vtllm::model
