#include "model/models/decoder_parts.h"

#include <cstring>
#include <optional>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/progress.h"
#include "vt/error.h"
#include "vt/ops/embedding.h"
#include "vt/ops/fused.h"
#include "vt/ops/norm.h"
#include "vt/registry.h"

namespace vtllm::model {

std::vector<vt::OpId> LinearOps(const QuantConfig& quant) {
  using vt::OpId;
  std::vector<OpId> ops = {OpId::kMatmul};
  if (quant.method == QuantMethod::kFp8Block || quant.method == QuantMethod::kFp8ChannelToken ||
      quant.method == QuantMethod::kFp8Online) {
    ops.push_back(OpId::kQuantFp8PerTokenGroup);
    ops.push_back(OpId::kMatmulFp8GroupScaled);
  }
  if (quant.method == QuantMethod::kFp8Static) {
    ops.push_back(OpId::kMatmulFp8);
    ops.push_back(OpId::kQuantFp8Static);
    ops.push_back(OpId::kMatmulFp8SiluMulQuantFp8);
  }
  return ops;
}

std::vector<vt::OpId> MoeBlockOps(const QuantConfig& quant) {
  using vt::OpId;
  std::vector<OpId> ops = {OpId::kMoeTopKRouting, OpId::kMoeExperts};
  if (quant.method == QuantMethod::kFp8Static) ops.push_back(OpId::kMoeExpertsFp8);
  if (quant.method == QuantMethod::kFp8Online) {  // experts quantized at load, activations per token
    ops.push_back(OpId::kQuantFp8PerTokenGroup);
    ops.push_back(OpId::kMoeExpertsFp8PerToken);
  }
  if (quant.method == QuantMethod::kFp8Block || quant.method == QuantMethod::kFp8ChannelToken) {
    ops.push_back(OpId::kQuantFp8PerTokenGroup);  // block / per-channel experts, activations per token (group)
    ops.push_back(OpId::kMoeExpertsFp8GroupScaled);
  }
  ops.push_back(OpId::kSigmoidGatedAdd);  // the shared expert's gate, where there is one
  return ops;
}

FeedForward FeedForward::Load(const LinearContext& lc, const std::string& prefix, const ModelConfig& cfg,
                              int64_t layer, const TensorParallel& tp) {
  FeedForward f;
  f.sparse = cfg.IsSparseLayer(layer);
  if (f.sparse) {
    f.moe = SparseMoeBlock::Load(lc, prefix,
                                 {.hidden = cfg.hidden_size, .intermediate = cfg.moe_intermediate_size,
                                  .num_experts = cfg.num_experts, .top_k = cfg.num_experts_per_tok,
                                  .norm_topk_prob = cfg.norm_topk_prob,
                                  .shared_intermediate = cfg.shared_expert_intermediate_size},
                                 tp);
  } else {
    f.mlp = GatedMlp::Load(lc, prefix, cfg.hidden_size, cfg.intermediate_size, tp);
  }
  return f;
}

std::vector<vt::OpId> FusedGroupQuantOps(const QuantConfig& quant, vt::DType act) {
  using vt::OpId;
  if (act != vt::DType::kBF16 || (quant.method != QuantMethod::kFp8Block && quant.method != QuantMethod::kFp8ChannelToken &&
                                  quant.method != QuantMethod::kFp8Online))
    return {};
  return {OpId::kRmsNormQuantFp8PerTokenGroup, OpId::kRmsNormZeroCentredQuantFp8PerTokenGroup,
          OpId::kRmsNormGatedQuantFp8PerTokenGroup, OpId::kSiluMulQuantFp8PerTokenGroup};
}

void FeedForward::Forward(const vt::Queue& q, const LinearInput& x, const vt::Tensor& out, bool fuse_quant,
                          ActivationBuffers& buffers) const {
  if (sparse)
    moe.Forward(q, x.x, out, buffers);
  else
    mlp.Forward(q, x, out, fuse_quant, buffers);
}

LinearInput NormForInput(const vt::Queue& q, const vt::Tensor& x, const vt::Tensor& weight, float eps,
                         bool zero_centred, const vt::Tensor* residual, const vt::Tensor& normed,
                         std::optional<float> input_scale, std::optional<Fp8GroupQuant> g,
                         const vt::Tensor* normed_too, ActivationBuffers& buffers) {
  const int64_t T = x.dim(0), H = x.dim(1);
  if (input_scale) {
    const vt::Tensor x8 = buffers.Get(kSlotX8, T, H, vt::DType::kF8E4M3);
    const auto op = zero_centred ? &vt::RmsNormZeroCentredQuantFp8 : &vt::RmsNormQuantFp8;
    op(q, x8, x, weight, eps, *input_scale, residual, normed_too);
    return x8;
  }
  const vt::OpId group_op =
      zero_centred ? vt::OpId::kRmsNormZeroCentredQuantFp8PerTokenGroup : vt::OpId::kRmsNormQuantFp8PerTokenGroup;
  if (g && vt::OpRegistered(group_op, q.device().type)) {
    const vt::Tensor x8 = buffers.Get(kSlotX8, T, H, vt::DType::kF8E4M3);
    const vt::Tensor xs = buffers.Get(kSlotX8Scales, T, g->Groups(H), vt::DType::kF32);
    const auto op = zero_centred ? &vt::RmsNormZeroCentredQuantFp8PerTokenGroup : &vt::RmsNormQuantFp8PerTokenGroup;
    op(q, x8, xs, x, weight, eps, g->group_size, g->amax_floor, g->scale_floor, residual, normed_too);
    return LinearInput{x8, xs};
  }
  const auto op = zero_centred ? &vt::RmsNormZeroCentred : &vt::RmsNorm;
  op(q, normed, x, weight, eps, residual);
  return normed;
}

LinearInput NormForLinear(const vt::Queue& q, const Linear& next, const vt::Tensor& x, const vt::Tensor& weight,
                          float eps, bool zero_centred, const vt::Tensor* residual, const vt::Tensor& normed,
                          bool fuse_quant, ActivationBuffers& buffers) {
  const bool static_fp8 = fuse_quant && next.takes_quantized_input();
  return NormForInput(q, x, weight, eps, zero_centred, residual, normed,
                      static_fp8 ? std::optional<float>(next.input_scale()) : std::nullopt,
                      fuse_quant ? next.input_group_quant() : std::nullopt, nullptr, buffers);
}

void NormThenFeedForward(const vt::Queue& q, const FeedForward& ff, const vt::Tensor& x, const vt::Tensor& weight,
                         float eps, bool zero_centred, const vt::Tensor* residual, const vt::Tensor& normed,
                         const vt::Tensor& out, bool fuse_quant, ActivationBuffers& buffers) {
  if (!ff.sparse) {
    const LinearInput in =
        NormForLinear(q, ff.mlp.gate_up(), x, weight, eps, zero_centred, residual, normed, fuse_quant, buffers);
    ff.mlp.Forward(q, in, out, fuse_quant, buffers);
    return;
  }
  const SparseMoeBlock& moe = ff.moe;
  const bool static_fp8 = fuse_quant && moe.takes_quantized_input();
  const LinearInput in = NormForInput(q, x, weight, eps, zero_centred, residual, normed,
                                      static_fp8 ? std::optional<float>(moe.input_scale()) : std::nullopt,
                                      fuse_quant ? moe.input_group_quant() : std::nullopt, &normed, buffers);
  const bool quantized = in.x.dtype() == vt::DType::kF8E4M3;
  moe.Forward(q, normed, out, buffers, quantized ? &in.x : nullptr, in.group_quantized() ? &in.scales : nullptr);
}

vt::Tensor LoadEmbedding(const BuildContext& ctx, const std::string& root) {
  const Checkpoint& ckpt = *ctx.linear.checkpoint;
  const std::string name = root + "embed_tokens.weight";
  const int64_t V = ctx.config->vocab_size, H = ctx.config->hidden_size;
  if (ctx.progress) ctx.progress->Advance(ckpt.Info(name).nbytes());
  if (ctx.tp.size == 1) return LoadFloatWeight(ckpt, name, {V, H}, ctx.linear.device);
  // Vocabulary-parallel: this rank's rows and a zero row after them (VocabShardIds).
  const vt::DType dt = ckpt.Info(name).dtype;
  VT_CHECK(dt == vt::DType::kF32 || dt == vt::DType::kBF16 || dt == vt::DType::kF16, ckpt.FileOf(name),
           ": tensor '", name, "' is ", vt::DTypeName(dt), " but must be F32, BF16 or F16");
  VT_CHECK(V % ctx.tp.size == 0, "tensor parallelism: vocabulary of ", V, " cannot be split over ", ctx.tp.size,
           " ranks");
  const vt::Tensor full = ckpt.GetAs(name, dt, {V, H});
  const int64_t rows = ctx.tp.Part(V);
  const size_t row_bytes = static_cast<size_t>(H) * vt::DTypeSize(dt);
  vt::Tensor shard = vt::Tensor::Empty({rows + 1, H}, dt, vt::Device::Cpu());
  std::memcpy(shard.data(), static_cast<const char*>(full.data()) + ctx.tp.Offset(V) * row_bytes, rows * row_bytes);
  std::memset(static_cast<char*>(shard.data()) + rows * row_bytes, 0, row_bytes);
  return WeightOnDevice(shard, ctx.linear.device);
}

void VocabShardIds(std::span<int32_t> ids, int64_t vocab, const TensorParallel& tp) {
  const int64_t v0 = tp.Offset(vocab), rows = tp.Part(vocab);
  for (int32_t& id : ids) id = id >= v0 && id < v0 + rows ? static_cast<int32_t>(id - v0) : static_cast<int32_t>(rows);
}

Linear LoadLmHead(const BuildContext& ctx, const std::string& root) {
  const Checkpoint& ckpt = *ctx.linear.checkpoint;
  const bool tied = ctx.config->tie_word_embeddings || !ckpt.Has("lm_head.weight");
  const std::string head = tied ? root + "embed_tokens" : "lm_head";
  QuantConfig none;
  LinearContext head_ctx = ctx.linear;
  const bool head_fp8 = !tied && ckpt.Info("lm_head.weight").dtype == vt::DType::kF8E4M3;
  if (!head_fp8) head_ctx.quant = &none;
  const int64_t V = ctx.config->vocab_size;
  LinearShard shard{head, V};
  if (ctx.tp.size > 1) {
    VT_CHECK(V % ctx.tp.size == 0, "tensor parallelism: vocabulary of ", V, " cannot be split over ", ctx.tp.size,
             " ranks");
    shard = {head, ctx.tp.Part(V), ctx.tp.Offset(V), V};
  }
  Linear lm_head = Linear::Load(head_ctx, {shard}, ctx.config->hidden_size, false);
  if (ctx.progress && !tied) ctx.progress->Advance(ckpt.Info("lm_head.weight").nbytes());
  if (ctx.progress) ctx.progress->Advance(ckpt.Info(root + "norm.weight").nbytes());
  return lm_head;
}

ResidualStream::ResidualStream(ActivationBuffers& b, int64_t T, int64_t H, vt::DType act)
    : residual(b.Get(kSlotResidual, T, H, act)),
      hidden(b.Get(kSlotHidden, T, H, act)),
      normed(b.Get(kSlotNormed, T, H, act)),
      mixed(b.Get(kSlotAttnOut, T, H, act)) {}

KvCacheSpec AttentionCacheSpec(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t num_blocks,
                               int64_t block_size, vt::DType dtype, vt::Device device) {
  KvCacheSpec s;
  s.num_layers = num_layers;
  s.num_kv_heads = num_kv_heads;
  s.head_dim = head_dim;
  s.block_size = block_size;
  s.num_blocks = num_blocks;
  s.dtype = dtype;
  s.device = device;
  return s;
}

void ApplyLmHead(const vt::Queue& q, const Linear& lm_head, const vt::Tensor& normed, const vt::Tensor& logit_rows,
                 const vt::Tensor& logits, ActivationBuffers& buffers, vt::Communicator* comm) {
  vt::Tensor rows = normed;
  if (logit_rows.defined()) {
    rows = buffers.Get(kSlotRows, logit_rows.dim(0), normed.dim(1), normed.dtype());
    vt::Embedding(q, rows, normed, logit_rows);  // a row gather
  }
  if (comm == nullptr) {
    lm_head.Apply(q, rows, logits);
    return;
  }
  const vt::Tensor part = buffers.Get(kSlotLogitsShard, logits.dim(0), lm_head.out_features(), vt::DType::kF32);
  lm_head.Apply(q, rows, part);
  comm->AllGatherColumns(q, part, logits);
}

}  // namespace vtllm::model
