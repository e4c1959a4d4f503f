// A loaded model on one device, ready to run steps over a paged KV cache.
//
// The engine runs steps with Execute: a StepInput (plain host data: tokens, positions, slots,
// block tables of the blocks its KV-cache manager assigned) is copied into persistent device
// buffers, and the logits of the wanted rows stay on the device for the sampler.
//
// Tools and tests without the engine use Forward over a KvCache (its own free list):
//   auto model = Model::Load(dir, vt::Device::Cpu(), std::nullopt);
//   KvCache cache = model->MakeKvCache(max_tokens);
//   SequenceKv seq;
//   std::vector<float> logits = model->Forward(prompt_ids, positions, {&cache, &seq});
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/models/causal_lm.h"
#include "model/quant_config.h"
#include "model/step_input.h"
#include "model/step_upload.h"
#include "vt/comm.h"
#include "vt/graph.h"

namespace vtllm::model {

struct LoadOptions {
  vt::Device device = vt::Device::Cpu();
  // Activation and KV-cache dtype: BF16 or F32; nullopt = the checkpoint's dtype (F32 stays
  // F32, anything else runs in BF16).
  std::optional<vt::DType> dtype;
  int cpu_threads = 0;                     // 0: one per hardware thread
  vt::CpuIsa cpu_isa = vt::CpuIsa::kBest;  // cap on the CPU kernels' instruction set (tests)
  bool progress = true;                    // a progress bar on stderr for slow loads
  // CUDA: decode steps run eagerly, not as replays of recorded graphs (vLLM's --enforce-eager).
  bool enforce_eager = false;
  // vLLM's --quantization: "" (the checkpoint's own), "fp8" (online FP8 of a BF16 checkpoint),
  // "modelopt" or "compressed-tensors" (ResolveQuantization in quant_config.h).
  std::string quantization{};
  // vLLM's --kv-cache-dtype: "auto" (the activation dtype), "fp8" or "fp8_e4m3" (an F8E4M3
  // cache with each layer's k_scale / v_scale from the checkpoint, else 1).
  std::string kv_cache_dtype = "auto";
  // Calibration: every linear shows its input to this observer (no step graphs then).
  LinearInputObserver* observer = nullptr;
  // vLLM's --tensor-parallel-size: the model split over this many ranks (docs/
  // tensor_parallel.md). On CUDA rank r runs on device `device.index + r` with NCCL; on CPU
  // the ranks are threads of this process (cpu_threads 0 then gives each rank its share of
  // the hardware threads). 1: the unsplit model.
  int tensor_parallel_size = 1;
  // Each norm or activation and the FP8 quantization of the next linear's input run as one
  // fused op where the model's activations are BF16 and the device has the op (the bytes are
  // the same); false: as separate ops (tests compare the two).
  bool fuse_quant = true;
};

// Sizes of the persistent step buffers (ReserveStepBuffers).
struct StepLimits {
  int64_t max_num_tokens = 0;       // tokens of one step
  int64_t max_num_seqs = 0;         // sequences of one step
  int64_t max_blocks_per_seq = 0;   // block-table stride
  int64_t max_logit_rows = 0;       // rows of logits of one step
};

// One sequence's KV state for a Forward: the cache and the sequence's blocks in it.
struct KvState {
  KvCache* cache = nullptr;
  SequenceKv* seq = nullptr;
};

// One sequence of a batched step: `num_new` tokens appended after its cached ones.
struct BatchEntry {
  SequenceKv* seq = nullptr;
  int64_t num_new = 0;
};

class Model {
 public:
  // Reads config.json and the quantization config, checks that the architecture is known
  // and that every op it needs has a kernel on `device` (listing all missing ones in one
  // vt::Error), then loads and processes the weights.
  static std::unique_ptr<Model> Load(const std::string& dir, const LoadOptions& options);
  static std::unique_ptr<Model> Load(const std::string& dir, vt::Device device,
                                     std::optional<vt::DType> dtype = std::nullopt);

  // A cache with room for `max_tokens` tokens in blocks of `block_size` (and, for a hybrid
  // model, recurrent state for `max_seqs` sequences at a time).
  KvCache MakeKvCache(int64_t max_tokens, int64_t block_size = 16, int64_t max_seqs = 8) const;
  // The KV tensors of `num_blocks` blocks (the engine's manager assigns them), and the
  // recurrent state of `num_state_slots` slots (required > 0 for a hybrid model).
  KvCacheTensors MakeKvCacheTensors(int64_t num_blocks, int64_t block_size, int64_t num_state_slots = 0) const;
  // Bytes one block of `block_size` tokens takes in every full-attention layer.
  int64_t KvCacheBytesPerBlock(int64_t block_size) const;
  // A hybrid model (Gated DeltaNet layers): every running sequence needs a state slot.
  bool has_recurrent_state() const { return lm_->StateCacheSpec(1).num_layers > 0; }
  // Bytes one sequence's recurrent state takes in every recurrent layer (0: none).
  int64_t StateBytesPerSlot() const { return lm_->StateCacheSpec(1).BytesPerSlot(); }

  // Allocates the device buffers a step reads (ids, positions, slots, block tables, sequence
  // lengths, query starts, logit rows, logits) for steps up to `limits`, once. A step beyond
  // them grows the buffers (an allocation; the engine sizes them so that none does).
  void ReserveStepBuffers(const StepLimits& limits);
  // Runs one step over `cache`. Returns the logits of step.logit_rows, [R, vocab] F32 on the
  // model's device: a view of the persistent buffer, valid until the next Execute.
  // Validates the input (token ids, positions, lengths) and throws vt::Error naming the value.
  vt::Tensor Execute(const StepInput& step, const KvCacheTensors& cache);

  // Runs `token_ids` at `positions` (which must continue kv.seq: seq.num_tokens, +1, ...),
  // appending them to the sequence's cache (blocks are reserved as needed). Returns F32
  // logits, row-major: [T, vocab] when all_logits, else [1, vocab] for the last token.
  std::vector<float> Forward(std::span<const int32_t> token_ids, std::span<const int64_t> positions, KvState kv,
                             bool all_logits = false);
  // Several sequences in one step; ids are the entries' new tokens concatenated. Returns
  // the logits of each entry's last token, [S, vocab].
  std::vector<float> ForwardBatch(KvCache& cache, std::span<const int32_t> token_ids,
                                  std::span<const BatchEntry> batch);

  const ModelConfig& config() const { return config_; }
  const QuantConfig& quant() const { return quant_; }
  vt::DType dtype() const { return dtype_; }
  vt::DType kv_cache_dtype() const { return kv_dtype_; }
  const vt::Queue& queue() const { return queue_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  // Bytes of weights one forward step reads (for bandwidth figures).
  int64_t weight_bytes() const { return lm_->weight_bytes(); }
  // Host seconds the last forward step took to issue its work, up to the wait for the
  // device: close to the whole step when the host (launches, dispatch) is the bound.
  double last_issue_seconds() const { return last_issue_s_; }

  // Decode steps (one new token per sequence, every row sampled, at most kMaxGraphBatch
  // sequences) on CUDA replay a graph recorded for their batch-size bucket (1, 2, 4, 8, then
  // multiples of 8), the batch padded up to it, unless the model was loaded with
  // enforce_eager or set_step_graphs(false). Hybrid models too: their padding rows have
  // state slot -1 (model_graphs.cpp). Counts, for tests and benchmarks:
  struct GraphStats {
    int64_t captures = 0;  // graphs recorded
    int64_t replays = 0;   // steps run as a replay
    int64_t eager = 0;     // steps run eagerly
    int64_t padded_eager = 0;  // of the eager steps, those run padded (set_padded_eager_steps)
  };
  static constexpr int64_t kMaxGraphBatch = 512;
  static int64_t GraphBucket(int64_t num_seqs);
  bool step_graphs() const { return graphs_enabled_; }
  void set_step_graphs(bool on);  // recorded graphs are kept while off (on CPU, graphs stay off)
  // Decode steps a graph would run take the replay's inputs (padded to the bucket, in the
  // same buffers) but run eagerly, on any device, in place of a replay: a test compares a
  // replay with this computation bit for bit, and the CPU tests the padding rows with it.
  bool padded_eager_steps() const { return padded_eager_; }
  void set_padded_eager_steps(bool on) {
    padded_eager_ = on;
    for (auto& p : peers_) p->set_padded_eager_steps(on);
  }
  // Whether a step may take token ids from the device (StepInput::device_tokens): not
  // under tensor parallelism, where each rank looks up its own shard's ids.
  bool TakesDeviceTokens() const { return comm_ == nullptr && peers_.empty(); }
  const GraphStats& graph_stats() const { return graph_stats_; }

  // Tensor parallelism. This model is rank 0: it owns ranks 1.. and runs every step on all
  // of them (one thread each), all-reducing after each row-parallel layer; the logits (all
  // of the vocabulary) are rank 0's, and its caches hold the other ranks' KV caches.
  // Memory figures (KvCacheBytesPerBlock, weight_bytes) are rank 0's: one device's.
  int tensor_parallel_size() const { return 1 + static_cast<int>(peers_.size()); }
  // Rank r's model (0: this one), e.g. for a test to check each rank's shard.
  const Model& rank(int r) const { return r == 0 ? *this : *peers_.at(static_cast<size_t>(r - 1)); }
  // This rank's communicator (null without tensor parallelism).
  const vt::Communicator* communicator() const { return comm_.get(); }

  ~Model();

 private:
  Model(ModelConfig config, QuantConfig quant, vt::Queue queue)
      : config_(std::move(config)), quant_(std::move(quant)), queue_(std::move(queue)) {}
  // Loads rank tp.rank's shard (the whole model when tp.size is 1).
  static std::unique_ptr<Model> LoadRank(const std::string& dir, const LoadOptions& options, const TensorParallel& tp,
                                         std::shared_ptr<vt::Communicator> comm);
  // Model::Load with tensor_parallel_size > 1 (model_tp.cpp): checks that the model can be
  // split, makes the group and loads every rank.
  static std::unique_ptr<Model> LoadTensorParallel(const std::string& dir, const LoadOptions& options);
  // One rank's step (the whole step without tensor parallelism).
  vt::Tensor ExecuteLocal(const StepInput& step, const KvCacheTensors& cache);
  // ReserveStepBuffers of this rank's buffers only: what a step that outgrows them calls.
  // During a step every rank runs on its own thread, so no rank may touch another's buffers.
  void ReserveOwnStepBuffers(const StepLimits& limits);
  // Runs the step on every rank, rank 0 on this thread (model_tp.cpp).
  vt::Tensor ExecuteTensorParallel(const StepInput& step, const KvCacheTensors& cache);
  std::vector<float> Run(KvCache& cache, std::span<const int32_t> token_ids, std::span<const BatchEntry> batch,
                         bool all_logits);
  void CheckStep(const StepInput& step, const KvCacheTensors& cache) const;
  // The step's token ids as this rank's embedding looks them up (VocabShardIds, in
  // rank_ids_); the ids themselves without tensor parallelism.
  const int32_t* RankIds(std::span<const int32_t> ids);
  // Replaces the token ids that step.device_tokens name by the device's (async scheduling),
  // in `ids`, the step's ids on the device.
  void PlaceDeviceTokens(const StepInput& step, const vt::Tensor& ids);
  // Runs a decode step as a graph replay (model_graphs.cpp), or padded and eagerly with
  // padded_eager_; counts it in graph_stats_. False when the step is not one a graph runs
  // (then nothing was enqueued).
  bool ExecuteGraph(const StepInput& step, const KvCacheTensors& cache);

  // Persistent device buffers of a step: its inputs (one arena, uploaded in one copy) and
  // the logits.
  struct StepBuffers {
    StepLimits limits;
    StepUpload inputs;
    vt::Tensor logits;
    bool reserved() const { return logits.defined(); }
  };
  StepBuffers buffers_;

  ModelConfig config_;
  QuantConfig quant_;
  vt::Queue queue_;
  vt::DType dtype_ = vt::DType::kBF16;
  vt::DType kv_dtype_ = vt::DType::kBF16;
  std::unique_ptr<CausalLM> lm_;
  double last_issue_s_ = 0.0;

  // Recorded decode steps, by bucket and cache (its blocks, block size and the addresses of
  // its KV and recurrent-state tensors).
  struct GraphKey {
    int64_t bucket = 0, num_blocks = 0, block_size = 0;
    std::vector<const void*> addresses;
    auto operator<=>(const GraphKey&) const = default;
  };
  bool graphs_enabled_ = false;
  bool padded_eager_ = false;
  std::map<GraphKey, vt::Graph> graphs_;
  uint64_t graphs_generation_ = 0;  // StepBufferGeneration() when graphs_ was last valid
  GraphStats graph_stats_;
  std::vector<int32_t> pad_i32_;    // a padded step's arrays, before the upload
  std::vector<int64_t> pad_i64_;

  // Tensor parallelism (model_tp.cpp): this rank's communicator, and on rank 0 the other
  // ranks and the threads that run their steps.
  std::shared_ptr<vt::Communicator> comm_;
  std::vector<int32_t> rank_ids_;  // RankIds' staging
  std::vector<std::unique_ptr<Model>> peers_;
  class Workers;
  std::shared_ptr<Workers> workers_;  // shared_ptr: Workers is complete only in model_tp.cpp
};

// The ops of `required` with no kernel on `device`, by name.
std::vector<std::string> MissingOps(std::span<const vt::OpId> required, vt::DeviceType device);

}  // namespace vtllm::model
