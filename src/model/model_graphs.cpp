// Decode steps as CUDA graph replays (Model::ExecuteGraph).
//
// A decode step of S sequences runs as the graph recorded for its bucket Sb >= S, over the
// same persistent buffers every step: the step's inputs are copied into them, padded to Sb
// rows. A padding row reads token 0 at position 0 with a context of one token in block 0,
// and its slot is -1, so it writes no KV entry; its logits rows are computed and ignored.
// Rows are independent through every op of a layer, so the real rows' results do not
// depend on the padding. In a hybrid model a padding row's recurrent-state slot is -1: the
// Gated DeltaNet ops (vt/ops/gdn.h) write zeros for its outputs and neither read nor write
// any slot, so a real sequence's state and the free slots are untouched. A graph holds the
// addresses of the buffers it was recorded with: when any of them is reallocated
// (StepBufferGeneration moves) every graph is dropped and recorded again on first use.
#include <algorithm>
#include <cstdio>
#include <numeric>

#include "model/layers/activation_buffers.h"
#include "model/model.h"
#include "vt/error.h"

namespace vtllm::model {

int64_t Model::GraphBucket(int64_t num_seqs) {
  if (num_seqs <= 1) return 1;
  if (num_seqs <= 2) return 2;
  if (num_seqs <= 4) return 4;
  return (num_seqs + 7) / 8 * 8;
}

// Tensor-parallel steps run eagerly for now: a rank whose capture fails falls back to eager
// steps on its own, and its collectives would then no longer meet the other ranks'.
void Model::set_step_graphs(bool on) { graphs_enabled_ = on && queue_.device().is_cuda() && comm_ == nullptr; }

bool Model::ExecuteGraph(const StepInput& step, const KvCacheTensors& cache) {
  const int64_t T = step.num_tokens(), S = step.num_seqs(), R = step.num_logit_rows();
  if (T != S || R != T || S > kMaxGraphBatch) return false;
  for (int64_t r = 0; r < R; ++r)
    if (step.logit_rows[static_cast<size_t>(r)] != r) return false;
  const int64_t Sb = GraphBucket(S);
  // The recorded block tables are [Sb, W] with W the reserved width, whatever this step's.
  const StepLimits& have = buffers_.limits;
  if (!buffers_.reserved() || Sb > have.max_num_tokens || Sb > have.max_num_seqs || Sb > have.max_logit_rows ||
      step.block_table_stride > have.max_blocks_per_seq)
    ReserveOwnStepBuffers({Sb, Sb, std::max(step.block_table_stride, have.max_blocks_per_seq), Sb});
  const int64_t W = buffers_.limits.max_blocks_per_seq;

  // The arrays padded to Sb rows, in one upload (the same offsets for every step of the bucket).
  using vt::DType;
  const size_t sb = static_cast<size_t>(Sb), s = static_cast<size_t>(S);
  StepUpload& in = buffers_.inputs;
  in.Begin();
  pad_i32_.assign(sb, 0);
  const int32_t* step_ids = RankIds(step.token_ids);
  std::copy(step_ids, step_ids + step.token_ids.size(), pad_i32_.begin());
  const vt::Tensor ids = in.Add(pad_i32_.data(), Sb, DType::kI32);
  AttentionMetadata meta;
  meta.num_tokens = Sb;
  pad_i64_.assign(sb, 0);
  std::copy(step.positions.begin(), step.positions.end(), pad_i64_.begin());
  meta.positions = in.Add(pad_i64_.data(), Sb, DType::kI64);
  pad_i64_.assign(sb, -1);  // padding writes no KV entry
  std::copy(step.slot_mapping.begin(), step.slot_mapping.end(), pad_i64_.begin());
  meta.slot_mapping = in.Add(pad_i64_.data(), Sb, DType::kI64);
  pad_i32_.assign(sb * static_cast<size_t>(W), 0);
  for (size_t r = 0; r < s; ++r)
    std::copy_n(step.block_tables.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(step.block_table_stride)),
                step.block_table_stride, pad_i32_.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(W)));
  meta.block_tables = in.Add(pad_i32_.data(), Sb * W, DType::kI32).View({Sb, W});
  pad_i32_.assign(sb, 1);  // padding: a context of one token
  std::copy(step.seq_lens.begin(), step.seq_lens.end(), pad_i32_.begin());
  meta.seq_lens = in.Add(pad_i32_.data(), Sb, DType::kI32);
  pad_i32_.resize(sb + 1);
  std::iota(pad_i32_.begin(), pad_i32_.end(), 0);
  meta.query_start_loc = in.Add(pad_i32_.data(), Sb + 1, DType::kI32);
  if (has_recurrent_state()) {
    pad_i32_.assign(sb, -1);  // padding reads and writes no recurrent state
    std::copy(step.state_slots.begin(), step.state_slots.end(), pad_i32_.begin());
    meta.state_slots = in.Add(pad_i32_.data(), Sb, DType::kI32);
  }
  in.Upload();
  PlaceDeviceTokens(step, ids);
  const vt::Tensor logits = buffers_.logits.Slice(0, 0, Sb);
  if (padded_eager_) {
    lm_->Forward(queue_, ids, meta, cache, vt::Tensor(), logits);
    ++graph_stats_.eager;
    ++graph_stats_.padded_eager;
    return true;
  }

  if (StepBufferGeneration().load() != graphs_generation_) {
    graphs_.clear();
    graphs_generation_ = StepBufferGeneration().load();
  }
  // Every cache tensor's address is recorded in the graph: a cache made later at other
  // addresses (a tool's new KvCache) gets a graph of its own.
  GraphKey key{Sb, cache.spec().num_blocks, cache.spec().block_size, {}};
  for (int64_t l = 0; l < cache.spec().num_layers; ++l) {
    key.addresses.push_back(cache.key(l).data());
    key.addresses.push_back(cache.value(l).data());
  }
  for (int64_t l = 0; l < cache.spec().state.num_layers; ++l)
    for (const vt::Tensor* t : {&cache.state(l).conv_q, &cache.state(l).conv_k, &cache.state(l).conv_v,
                                &cache.state(l).ssm})
      key.addresses.push_back(t->data());
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    std::string why_not;
    vt::Graph g = vt::Graph::Capture(
        queue_, [&] { lm_->Forward(queue_, ids, meta, cache, vt::Tensor(), logits); }, &why_not);
    if (!g.defined()) {
      std::fprintf(stderr, "vtllm: CUDA graphs off (decode steps run eagerly): recording a step failed: %s\n",
                   why_not.c_str());
      set_step_graphs(false);
      return false;  // the eager path uploads the inputs again
    }
    ++graph_stats_.captures;
    // Recording may have grown buffers that older graphs use: those are stale now.
    if (StepBufferGeneration().load() != graphs_generation_) {
      graphs_.clear();
      graphs_generation_ = StepBufferGeneration().load();
    }
    it = graphs_.emplace(key, std::move(g)).first;
  }
  it->second.Replay();
  ++graph_stats_.replays;
  return true;
}

}  // namespace vtllm::model
