#include "model/model.h"

#include <chrono>
#include <numeric>

#include "model/progress.h"
#include "vt/error.h"
#include "vt/registry.h"

namespace vtllm::model {

namespace {

// The ops a model of this config needs, known before any weight is read: the decoder's own
// plus the FP8 ones when the checkpoint is quantized.
std::vector<vt::OpId> OpsForConfig(const QuantConfig& quant, vt::DType dtype) {
  using vt::OpId;
  std::vector<OpId> ops = {OpId::kEmbedding,      OpId::kRmsNorm, OpId::kRotaryEmbedding, OpId::kKvCacheWrite,
                           OpId::kPagedAttention, OpId::kMatmul,  OpId::kSiluMul};
  if (quant.method == QuantMethod::kFp8Static) {
    ops.push_back(OpId::kMatmulFp8);
    ops.push_back(OpId::kQuantFp8Static);
    if (dtype == vt::DType::kBF16) {  // the fused recipes serve BF16 activations
      ops.push_back(OpId::kRmsNormQuantFp8);
      ops.push_back(OpId::kSiluMulQuantFp8);
    }
  }
  return ops;
}

vt::Queue MakeQueue(const LoadOptions& o) {
  return o.device.is_cpu() ? vt::Queue::Cpu(o.cpu_threads, o.cpu_isa) : vt::Queue::Cuda(o.device.index);
}

}  // namespace

std::vector<std::string> MissingOps(std::span<const vt::OpId> required, vt::DeviceType device) {
  vt::EnsureBackendsRegistered();
  std::vector<std::string> missing;
  for (vt::OpId op : required)
    if (!vt::OpRegistered(op, device)) missing.emplace_back(vt::OpName(op));
  return missing;
}

std::unique_ptr<Model> Model::Load(const std::string& dir, vt::Device device, std::optional<vt::DType> dtype) {
  LoadOptions o;
  o.device = device;
  o.dtype = dtype;
  return Load(dir, o);
}

std::unique_ptr<Model> Model::Load(const std::string& dir, const LoadOptions& options) {
  ModelConfig config = ModelConfig::FromDir(dir);
  QuantConfig quant = QuantConfig::FromDir(dir);
  const Architecture& arch = FindArchitecture(config.architecture);
  const vt::DType dtype = options.dtype.value_or(config.dtype == vt::DType::kF32 ? vt::DType::kF32 : vt::DType::kBF16);
  VT_CHECK(dtype == vt::DType::kBF16 || dtype == vt::DType::kF32, "Model::Load: dtype ", vt::DTypeName(dtype),
           " is not supported (use bfloat16 or float32)");
  // Every op the model will dispatch must have a kernel on the device: say all that are
  // missing at once, before reading any weight (no fallback to another device).
  {
    const std::vector<vt::OpId> ops = OpsForConfig(quant, dtype);
    const std::vector<std::string> missing = MissingOps(ops, options.device.type);
    if (!missing.empty()) {
      std::string list;
      for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
      throw vt::Error(
          vt::StrCat(dir, ": ", config.architecture, quant.method == QuantMethod::kFp8Static ? " (FP8)" : "",
                     " needs ops with no kernel for ", vt::DeviceTypeName(options.device.type), ": ", list));
    }
  }
  vt::Queue queue = MakeQueue(options);
  std::unique_ptr<Model> model(new Model(std::move(config), std::move(quant), queue));
  model->dtype_ = dtype;

  Checkpoint ckpt = Checkpoint::Open(dir);
  vt::Queue host = options.device.is_cpu() ? queue : vt::Queue::Cpu(options.cpu_threads);
  std::unique_ptr<LoadProgress> progress;
  if (options.progress) progress = std::make_unique<LoadProgress>(ckpt.total_bytes(), "Loading weights");
  BuildContext ctx;
  ctx.config = &model->config_;
  ctx.linear.checkpoint = &ckpt;
  ctx.linear.quant = &model->quant_;
  ctx.linear.device = options.device;
  ctx.linear.host_queue = &host;
  ctx.act_dtype = dtype;
  ctx.progress = progress.get();
  model->lm_ = arch.create(ctx);
  if (progress) progress->Finish();
  // The built model may need fewer ops than the config suggested, never more.
  const std::vector<vt::OpId> ops = model->lm_->RequiredOps();
  const std::vector<std::string> missing = MissingOps(ops, options.device.type);
  VT_CHECK(missing.empty(), dir, ": the model needs ", missing.front(), " which has no kernel for ",
           vt::DeviceTypeName(options.device.type));
  return model;
}

KvCache Model::MakeKvCache(int64_t max_tokens, int64_t block_size) const {
  VT_CHECK(max_tokens > 0 && block_size > 0, "MakeKvCache: max_tokens ", max_tokens, " and block_size ", block_size,
           " must be > 0");
  return KvCache(lm_->CacheSpec((max_tokens + block_size - 1) / block_size, block_size, queue_.device()));
}

std::vector<float> Model::Forward(std::span<const int32_t> token_ids, std::span<const int64_t> positions, KvState kv,
                                  bool all_logits) {
  VT_CHECK(kv.cache != nullptr && kv.seq != nullptr, "Forward: no KV state");
  VT_CHECK(positions.size() == token_ids.size(), "Forward: ", token_ids.size(), " token ids but ", positions.size(),
           " positions");
  for (size_t i = 0; i < positions.size(); ++i)
    VT_CHECK(positions[i] == kv.seq->num_tokens + static_cast<int64_t>(i), "Forward: positions[", i,
             "] = ", positions[i], " but the sequence has ", kv.seq->num_tokens,
             " cached tokens (positions must continue it)");
  const BatchEntry entry{kv.seq, static_cast<int64_t>(token_ids.size())};
  return Run(*kv.cache, token_ids, std::span<const BatchEntry>(&entry, 1), all_logits);
}

std::vector<float> Model::ForwardBatch(KvCache& cache, std::span<const int32_t> token_ids,
                                       std::span<const BatchEntry> batch) {
  return Run(cache, token_ids, batch, false);
}

std::vector<float> Model::Run(KvCache& cache, std::span<const int32_t> token_ids, std::span<const BatchEntry> batch,
                              bool all_logits) {
  const auto issue_start = std::chrono::steady_clock::now();
  const int64_t T = static_cast<int64_t>(token_ids.size());
  int64_t total = 0;
  for (const BatchEntry& e : batch) {
    VT_CHECK(e.seq != nullptr && e.num_new > 0, "Forward: every sequence needs at least one new token");
    total += e.num_new;
  }
  VT_CHECK(total == T && T > 0, "Forward: ", T, " token ids for ", total, " new tokens");
  for (int32_t id : token_ids)
    VT_CHECK(id >= 0 && id < config_.vocab_size, "Forward: token id ", id, " is outside the vocabulary of ",
             config_.vocab_size);
  for (const BatchEntry& e : batch) {
    VT_CHECK(e.seq->num_tokens + e.num_new <= config_.max_position_embeddings, "Forward: a sequence of ",
             e.seq->num_tokens + e.num_new, " tokens exceeds max_position_embeddings ",
             config_.max_position_embeddings);
    cache.Reserve(*e.seq, e.num_new);
  }
  std::vector<StepSequence> steps;
  std::vector<int32_t> rows;
  int64_t end = 0;
  for (const BatchEntry& e : batch) {
    steps.push_back({e.seq, e.num_new});
    end += e.num_new;
    rows.push_back(static_cast<int32_t>(end - 1));
  }
  if (all_logits) {
    rows.resize(static_cast<size_t>(T));
    std::iota(rows.begin(), rows.end(), 0);
  }
  const vt::Device dev = queue_.device();
  const AttentionMetadata meta = BuildAttentionMetadata(cache, steps);
  const vt::Tensor ids = vt::Tensor::FromHost(token_ids.data(), {T}, vt::DType::kI32, dev);
  const int64_t R = static_cast<int64_t>(rows.size());
  const vt::Tensor row_ids = vt::Tensor::FromHost(rows.data(), {R}, vt::DType::kI32, dev);
  const vt::Tensor logits = vt::Tensor::Empty({R, config_.vocab_size}, vt::DType::kF32, dev);
  lm_->Forward(queue_, ids, meta, cache, row_ids, logits);
  last_issue_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - issue_start).count();
  queue_.Synchronize();
  for (const BatchEntry& e : batch) e.seq->num_tokens += e.num_new;
  std::vector<float> out(static_cast<size_t>(R * config_.vocab_size));
  logits.CopyToHost(out.data());
  return out;
}

}  // namespace vtllm::model
