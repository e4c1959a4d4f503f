#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "model/layers/activation_buffers.h"
#include "model/models/decoder_parts.h"
#include "model/progress.h"
#include "vt/error.h"
#include "vt/registry.h"

namespace vtllm::model {

namespace {

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
  if (options.tensor_parallel_size != 1) return LoadTensorParallel(dir, options);
  return LoadRank(dir, options, TensorParallel{}, nullptr);
}

std::unique_ptr<Model> Model::LoadRank(const std::string& dir, const LoadOptions& options, const TensorParallel& tp,
                                       std::shared_ptr<vt::Communicator> comm) {
  ModelConfig config = ModelConfig::FromDir(dir);
  QuantConfig quant = ResolveQuantization(QuantConfig::FromDir(dir), options.quantization, dir);
  const Architecture& arch = FindArchitecture(config.architecture);
  const vt::DType dtype = options.dtype.value_or(config.dtype == vt::DType::kF32 ? vt::DType::kF32 : vt::DType::kBF16);
  VT_CHECK(dtype == vt::DType::kBF16 || dtype == vt::DType::kF32, "Model::Load: dtype ", vt::DTypeName(dtype),
           " is not supported (use bfloat16 or float32)");
  const vt::DType kv_dtype = ParseKvCacheDtype(options.kv_cache_dtype).value_or(dtype);
  // Every op the model will dispatch must have a kernel on the device: say all that are
  // missing at once, before reading any weight (no fallback to another device).
  {
    const std::vector<vt::OpId> ops = arch.required_ops(quant, dtype);
    const std::vector<std::string> missing = MissingOps(ops, options.device.type);
    if (!missing.empty()) {
      std::string list;
      for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
      throw vt::Error(
          vt::StrCat(dir, ": ", config.architecture, IsFp8(quant.method) ? " (FP8)" : "",
                     " needs ops with no kernel for ", vt::DeviceTypeName(options.device.type), ": ", list));
    }
  }
  vt::Queue queue = MakeQueue(options);
  std::unique_ptr<Model> model(new Model(std::move(config), std::move(quant), queue));
  model->dtype_ = dtype;
  model->kv_dtype_ = kv_dtype;
  model->graphs_enabled_ = options.device.is_cuda() && !options.enforce_eager && options.observer == nullptr &&
                           tp.size == 1;  // set_step_graphs says why

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
  ctx.linear.observer = options.observer;
  OnlineFp8AmaxCache amax_cache;  // online FP8: each stored tensor scanned once in this load
  ctx.linear.amax_cache = &amax_cache;
  ctx.act_dtype = dtype;
  ctx.kv_dtype = kv_dtype;
  ctx.linear.fuse_quant = options.fuse_quant;
  ctx.linear.act_dtype = dtype;
  ctx.progress = progress.get();
  ctx.tp = tp;
  ctx.comm = comm.get();
  model->comm_ = std::move(comm);
  model->lm_ = arch.create(ctx);
  if (progress) progress->Finish();
  return model;
}

KvCache Model::MakeKvCache(int64_t max_tokens, int64_t block_size, int64_t max_seqs) const {
  VT_CHECK(max_tokens > 0 && block_size > 0 && max_seqs > 0, "MakeKvCache: max_tokens ", max_tokens,
           ", block_size ", block_size, " and max_seqs ", max_seqs, " must be > 0");
  KvCacheSpec spec = lm_->CacheSpec((max_tokens + block_size - 1) / block_size, block_size, queue_.device());
  spec.state = lm_->StateCacheSpec(max_seqs);
  KvCache cache(spec);
  if (!peers_.empty()) {
    std::vector<KvCacheTensors> peers;
    for (const auto& p : peers_) peers.push_back(p->MakeKvCache(max_tokens, block_size, max_seqs).tensors());
    cache.set_peer_shards(std::move(peers));
  }
  return cache;
}

KvCacheTensors Model::MakeKvCacheTensors(int64_t num_blocks, int64_t block_size, int64_t num_state_slots) const {
  VT_CHECK(num_blocks > 0 && block_size > 0, "MakeKvCacheTensors: num_blocks ", num_blocks, " and block_size ",
           block_size, " must be > 0");
  KvCacheSpec spec = lm_->CacheSpec(num_blocks, block_size, queue_.device());
  if (has_recurrent_state()) {
    VT_CHECK(num_state_slots > 0, "MakeKvCacheTensors: ", config_.architecture,
             " has recurrent layers and needs state slots (one per running sequence), got ", num_state_slots);
    spec.state = lm_->StateCacheSpec(num_state_slots);
  }
  KvCacheTensors cache(spec);
  if (!peers_.empty()) {
    std::vector<KvCacheTensors> peers;
    for (const auto& p : peers_) peers.push_back(p->MakeKvCacheTensors(num_blocks, block_size, num_state_slots));
    cache.set_peer_shards(std::move(peers));
  }
  return cache;
}

int64_t Model::KvCacheBytesPerBlock(int64_t block_size) const {
  return lm_->CacheSpec(1, block_size, queue_.device()).BytesPerBlock();
}

const int32_t* Model::RankIds(std::span<const int32_t> ids) {
  if (!comm_) return ids.data();
  rank_ids_.assign(ids.begin(), ids.end());
  VocabShardIds(rank_ids_, config_.vocab_size, TensorParallel{comm_->rank(), comm_->size()});
  return rank_ids_.data();
}

void Model::PlaceDeviceTokens(const StepInput& step, const vt::Tensor& ids) {
  const auto& d = step.device_tokens;
  for (size_t i = 0; i < d.size();) {
    size_t j = i + 1;  // a run of consecutive rows from consecutive sources: one copy
    while (j < d.size() && d[j].row == d[j - 1].row + 1 && d[j].source == d[j - 1].source + 1) ++j;
    const int64_t n = static_cast<int64_t>(j - i);
    vt::CopyOnDeviceAsync(queue_, ids.Slice(0, d[i].row, d[i].row + n),
                          step.device_token_source.Slice(0, d[i].source, d[i].source + n),
                          static_cast<size_t>(n) * sizeof(int32_t));
    i = j;
  }
}

void Model::ReserveStepBuffers(const StepLimits& want) {
  for (const auto& p : peers_) p->ReserveOwnStepBuffers(want);
  ReserveOwnStepBuffers(want);
}

void Model::ReserveOwnStepBuffers(const StepLimits& want) {
  StepLimits l = buffers_.limits;
  l.max_num_tokens = std::max(l.max_num_tokens, want.max_num_tokens);
  l.max_num_seqs = std::max(l.max_num_seqs, want.max_num_seqs);
  l.max_blocks_per_seq = std::max(l.max_blocks_per_seq, want.max_blocks_per_seq);
  l.max_logit_rows = std::max(l.max_logit_rows, want.max_logit_rows);
  using vt::DType;
  const int64_t T = l.max_num_tokens, S = l.max_num_seqs, R = l.max_logit_rows;
  const size_t input_bytes = StepUpload::Bytes(T, DType::kI32) + 2 * StepUpload::Bytes(T, DType::kI64) +
                             StepUpload::Bytes(S * l.max_blocks_per_seq, DType::kI32) +
                             3 * StepUpload::Bytes(S, DType::kI32) + StepUpload::Bytes(S + 1, DType::kI32) +
                             StepUpload::Bytes(R, DType::kI32);
  bool grew = buffers_.inputs.Reserve(queue_, input_bytes);
  if (R > buffers_.limits.max_logit_rows || !buffers_.logits.defined()) {
    grew = true;
    buffers_.logits = vt::Tensor::Empty({R, config_.vocab_size}, DType::kF32, queue_.device());
  }
  // A graph records its step's views of the input arena, laid out with the block-table width
  // of these limits: a wider one moves them even when the arena itself stays.
  grew = grew || l.max_blocks_per_seq != buffers_.limits.max_blocks_per_seq;
  buffers_.limits = l;
  if (grew) ++StepBufferGeneration();
}

void Model::CheckStep(const StepInput& step, const KvCacheTensors& cache) const {
  const int64_t T = step.num_tokens(), S = step.num_seqs(), R = step.num_logit_rows();
  VT_CHECK(T > 0 && S > 0, "Execute: an empty step (", T, " tokens, ", S, " sequences)");
  VT_CHECK(static_cast<int64_t>(step.positions.size()) == T && static_cast<int64_t>(step.slot_mapping.size()) == T,
           "Execute: ", T, " token ids but ", step.positions.size(), " positions and ", step.slot_mapping.size(),
           " slots");
  VT_CHECK(static_cast<int64_t>(step.query_start_loc.size()) == S + 1 && step.query_start_loc.front() == 0 &&
               step.query_start_loc.back() == T,
           "Execute: query_start_loc must have ", S + 1, " entries from 0 to ", T);
  VT_CHECK(static_cast<int64_t>(step.block_tables.size()) == S * step.block_table_stride,
           "Execute: block tables of ", step.block_tables.size(), " entries for ", S, " sequences of stride ",
           step.block_table_stride);
  for (int32_t id : step.token_ids)
    VT_CHECK(id >= 0 && id < config_.vocab_size, "Forward: token id ", id, " is outside the vocabulary of ",
             config_.vocab_size);
  const int64_t slots = cache.spec().num_blocks * cache.spec().block_size;
  for (int64_t t = 0; t < T; ++t)
    VT_CHECK(step.slot_mapping[t] >= 0 && step.slot_mapping[t] < slots, "Execute: slot_mapping[", t, "] = ",
             step.slot_mapping[t], " is outside the cache's ", slots, " slots");
  for (int64_t s = 0; s < S; ++s) {
    VT_CHECK(step.query_start_loc[s + 1] > step.query_start_loc[s], "Execute: sequence ", s, " has no new tokens");
    VT_CHECK(step.seq_lens[s] <= config_.max_position_embeddings, "Forward: a sequence of ", step.seq_lens[s],
             " tokens exceeds max_position_embeddings ", config_.max_position_embeddings);
    const int64_t blocks = (step.seq_lens[s] + cache.spec().block_size - 1) / cache.spec().block_size;
    VT_CHECK(blocks <= step.block_table_stride, "Execute: sequence ", s, " of ", step.seq_lens[s],
             " tokens needs ", blocks, " blocks but its table has ", step.block_table_stride);
    for (int64_t b = 0; b < blocks; ++b) {
      const int32_t id = step.block_tables[static_cast<size_t>(s * step.block_table_stride + b)];
      VT_CHECK(id >= 0 && id < cache.spec().num_blocks, "Execute: block ", id, " of sequence ", s,
               " is outside the cache's ", cache.spec().num_blocks, " blocks");
    }
  }
  for (int32_t r : step.logit_rows)
    VT_CHECK(r >= 0 && r < T, "Execute: logit row ", r, " is outside the step's ", T, " tokens");
  const StateSpec& st = cache.spec().state;
  if (has_recurrent_state()) {
    VT_CHECK(st.num_layers > 0, "Execute: ", config_.architecture, " has recurrent layers but the cache has no state");
    VT_CHECK(static_cast<int64_t>(step.state_slots.size()) == S, "Execute: ", S, " sequences but ",
             step.state_slots.size(), " state slots");
    std::vector<int32_t> seen(step.state_slots);
    std::sort(seen.begin(), seen.end());
    for (size_t i = 0; i < seen.size(); ++i) {
      VT_CHECK(seen[i] >= 0 && seen[i] < st.num_slots, "Execute: state slot ", seen[i], " is outside the cache's ",
               st.num_slots, " slots");
      VT_CHECK(i == 0 || seen[i] != seen[i - 1], "Execute: two sequences share state slot ", seen[i]);
    }
  }
  VT_CHECK(R >= 0, "Execute: negative logit rows");
  if (!step.device_tokens.empty()) {
    VT_CHECK(comm_ == nullptr && peers_.empty(),
             "Execute: tokens drawn on the device (async scheduling) need a model without tensor parallelism");
    const vt::Tensor& src = step.device_token_source;
    VT_CHECK(src.defined() && src.device() == queue_.device() && src.dtype() == vt::DType::kI32 && src.ndim() == 1,
             "Execute: device_token_source must be a 1-D I32 tensor on ", vt::ToString(queue_.device()));
    int32_t prev = -1;
    for (const StepInput::DeviceToken& d : step.device_tokens) {
      VT_CHECK(d.row > prev && d.row < T, "Execute: device token row ", d.row, " is not ascending inside the step's ",
               T, " tokens");
      VT_CHECK(d.source >= 0 && d.source < src.numel(), "Execute: device token source ", d.source,
               " is outside the ", src.numel(), " sampled ids");
      prev = d.row;
    }
  }
}

vt::Tensor Model::Execute(const StepInput& step, const KvCacheTensors& cache) {
  if (!peers_.empty()) return ExecuteTensorParallel(step, cache);
  return ExecuteLocal(step, cache);
}

vt::Tensor Model::ExecuteLocal(const StepInput& step, const KvCacheTensors& cache) {
  const auto issue_start = std::chrono::steady_clock::now();
  CheckStep(step, cache);
  // A sequence starting at position 0 starts from a zero state. The zeroing is a copy from
  // the host, outside any recorded graph, ordered with the queue's work (vt's synchronous
  // copies wait for the queue's stream), before the step's inputs are uploaded.
  if (has_recurrent_state())
    for (int64_t s = 0; s < step.num_seqs(); ++s)
      if (step.positions[static_cast<size_t>(step.query_start_loc[static_cast<size_t>(s)])] == 0)
        cache.ZeroStateSlot(step.state_slots[static_cast<size_t>(s)]);
  if ((graphs_enabled_ || padded_eager_) && ExecuteGraph(step, cache)) {
    last_issue_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - issue_start).count();
    return buffers_.logits.Slice(0, 0, step.num_logit_rows());
  }
  ++graph_stats_.eager;
  const int64_t T = step.num_tokens(), S = step.num_seqs(), R = step.num_logit_rows();
  const int64_t W = step.block_table_stride;
  StepLimits need{T, S, W, std::max<int64_t>(R, 1)};
  const StepLimits& have = buffers_.limits;
  if (!buffers_.reserved() || T > have.max_num_tokens || S > have.max_num_seqs || W > have.max_blocks_per_seq ||
      need.max_logit_rows > have.max_logit_rows)
    ReserveOwnStepBuffers(need);
  using vt::DType;
  StepUpload& in = buffers_.inputs;
  in.Begin();
  const vt::Tensor ids = in.Add(RankIds(step.token_ids), T, DType::kI32);
  AttentionMetadata meta;
  meta.num_tokens = T;
  meta.positions = in.Add(step.positions.data(), T, DType::kI64);
  meta.slot_mapping = in.Add(step.slot_mapping.data(), T, DType::kI64);
  meta.block_tables = in.Add(step.block_tables.data(), S * W, DType::kI32).View({S, W});
  meta.seq_lens = in.Add(step.seq_lens.data(), S, DType::kI32);
  meta.query_start_loc = in.Add(step.query_start_loc.data(), S + 1, DType::kI32);
  if (has_recurrent_state()) meta.state_slots = in.Add(step.state_slots.data(), S, DType::kI32);
  bool identity = R == T;
  for (int64_t r = 0; identity && r < R; ++r) identity = step.logit_rows[r] == r;
  // No row is sampled (every sequence is mid-prefill): the model still writes the KV cache;
  // the head runs on one row so that every layer's work is the same as in a sampled step.
  const int32_t last = static_cast<int32_t>(T - 1);
  vt::Tensor rows;
  if (!identity) rows = R > 0 ? in.Add(step.logit_rows.data(), R, DType::kI32) : in.Add(&last, 1, DType::kI32);
  in.Upload();
  PlaceDeviceTokens(step, ids);
  const vt::Tensor logits = buffers_.logits.Slice(0, 0, R);
  if (identity) lm_->Forward(queue_, ids, meta, cache, vt::Tensor(), logits);
  else lm_->Forward(queue_, ids, meta, cache, rows, R > 0 ? logits : buffers_.logits.Slice(0, 0, 1));
  last_issue_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - issue_start).count();
  return logits;
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
  for (const BatchEntry& e : batch)
    VT_CHECK(e.seq->num_tokens + e.num_new <= config_.max_position_embeddings, "Forward: a sequence of ",
             e.seq->num_tokens + e.num_new, " tokens exceeds max_position_embeddings ",
             config_.max_position_embeddings);
  // Reserve every sequence's blocks first; on failure give back what this call took.
  std::vector<size_t> had;
  for (const BatchEntry& e : batch) had.push_back(e.seq->block_table.size());
  try {
    for (const BatchEntry& e : batch) cache.Reserve(*e.seq, e.num_new);
  } catch (...) {
    for (size_t i = 0; i < batch.size(); ++i) batch[i].seq->block_table.resize(had[i]);
    throw;
  }
  size_t stride = 1;
  for (const BatchEntry& e : batch) stride = std::max(stride, e.seq->block_table.size());
  StepInput step;
  step.Clear(static_cast<int64_t>(stride));
  int64_t at = 0;
  for (const BatchEntry& e : batch) {
    step.AddSequence(token_ids.subspan(static_cast<size_t>(at), static_cast<size_t>(e.num_new)), e.seq->num_tokens,
                     e.seq->block_table, cache.spec().block_size, e.seq->state_slot);
    at += e.num_new;
    if (!all_logits) step.logit_rows.push_back(static_cast<int32_t>(at - 1));
  }
  if (all_logits) {
    step.logit_rows.resize(static_cast<size_t>(T));
    std::iota(step.logit_rows.begin(), step.logit_rows.end(), 0);
  }
  const vt::Tensor logits = Execute(step, cache.tensors());
  queue_.Synchronize();
  for (const BatchEntry& e : batch) e.seq->num_tokens += e.num_new;
  std::vector<float> out(static_cast<size_t>(logits.numel()));
  logits.CopyToHost(out.data());
  return out;
}

}  // namespace vtllm::model
