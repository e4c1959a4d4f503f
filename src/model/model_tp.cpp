// Tensor parallelism of a Model (LoadOptions::tensor_parallel_size > 1): which models can be
// split, the group of ranks, and the threads that run ranks 1.. of every step.
//
// Rank 0 is the Model the caller holds; it owns the other ranks' Models. A step (plain host
// data) is checked once on rank 0, handed to every rank's thread, and each rank runs it over
// its own shard and KV cache; the ranks meet in the collectives of the layers (an all-reduce
// after o_proj and after each MLP or MoE block, an all-gather of the logits). Rank 0 runs on
// the caller's thread, so the engine's scheduler and sampler see one model.
#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "model/load_error.h"
#include "model/model.h"
#include "vt/error.h"

namespace vtllm::model {

// One thread per rank 1..N-1, each running the job it is handed, one step at a time.
class Model::Workers {
 public:
  explicit Workers(int n) : slots_(static_cast<size_t>(n)) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this, i] { Loop(static_cast<size_t>(i)); });
  }
  ~Workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  // Starts job(i) on worker i for every worker.
  void Start(std::function<void(size_t)> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = std::move(job);
      for (Slot& s : slots_) {
        s.pending = true;
        s.error = nullptr;
      }
      ++generation_;
    }
    cv_.notify_all();
  }
  // Waits for every worker's job; returns the first worker's error, if any.
  std::exception_ptr Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] {
      for (const Slot& s : slots_)
        if (s.pending) return false;
      return true;
    });
    for (const Slot& s : slots_)
      if (s.error) return s.error;
    return nullptr;
  }

 private:
  struct Slot {
    bool pending = false;
    std::exception_ptr error;
  };
  void Loop(size_t i) {
    uint64_t seen = 0;
    for (;;) {
      std::function<void(size_t)> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      std::exception_ptr error;
      try {
        job(i);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        slots_[i].error = error;
        slots_[i].pending = false;
      }
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<Slot> slots_;
  std::vector<std::thread> threads_;
  std::function<void(size_t)> job_;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

Model::~Model() = default;

namespace {

// Refuses, with a LoadError naming config.json and the numbers, a model that this build
// cannot split over n ranks.
void CheckSplittable(const std::string& dir, const ModelConfig& c, const QuantConfig& quant, int n) {
  const std::string where = dir + "/config.json";
  const std::string_view a = c.architecture;
  if (c.IsHybrid() || !(a == "LlamaForCausalLM" || a == "Qwen2ForCausalLM" || a == "Qwen3ForCausalLM" ||
                        a == "Qwen2MoeForCausalLM" || a == "Qwen3MoeForCausalLM"))
    ThrowLoadError(where, ": --tensor-parallel-size ", n, ": ", c.architecture,
                   " cannot be split yet; tensor parallelism supports the Llama, Qwen2, Qwen3, Qwen2-MoE and "
                   "Qwen3-MoE decoders (no hybrid models)");
  if (quant.method != QuantMethod::kNone && quant.method != QuantMethod::kFp8Static)
    ThrowLoadError(where, ": --tensor-parallel-size ", n,
                   ": tensor parallelism supports unquantized and static per-tensor FP8 checkpoints, not this "
                   "checkpoint's quantization (block, per-channel or online FP8)");
  const int64_t Hq = c.num_attention_heads, Hk = c.num_key_value_heads;
  if (Hq % n != 0)
    ThrowLoadError(where, ": --tensor-parallel-size ", n, " does not divide num_attention_heads ", Hq);
  if (Hk <= 0 || (Hk % n != 0 && n % Hk != 0))
    ThrowLoadError(where, ": --tensor-parallel-size ", n, " and num_key_value_heads ", Hk,
                   ": one must divide the other (KV heads are split, or replicated when fewer than the ranks)");
  bool dense = false, sparse = false;  // which kinds of feed-forward layers the model has
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    sparse = sparse || c.IsSparseLayer(l);
    dense = dense || !c.IsSparseLayer(l);
  }
  if (dense && c.intermediate_size % n != 0)
    ThrowLoadError(where, ": --tensor-parallel-size ", n, " does not divide intermediate_size ", c.intermediate_size);
  // A sparse layer splits each expert's intermediate size, and its shared expert's.
  if (sparse && c.moe_intermediate_size % n != 0)
    ThrowLoadError(where, ": --tensor-parallel-size ", n, " does not divide moe_intermediate_size ",
                   c.moe_intermediate_size, " (each rank keeps a block of every expert's intermediate size)");
  if (sparse && c.shared_expert_intermediate_size % n != 0)
    ThrowLoadError(where, ": --tensor-parallel-size ", n, " does not divide shared_expert_intermediate_size ",
                   c.shared_expert_intermediate_size);
  if (c.vocab_size % n != 0)
    ThrowLoadError(where, ": --tensor-parallel-size ", n, " does not divide vocab_size ", c.vocab_size,
                   " (vtllm does not pad the vocabulary as vLLM does)");
}

}  // namespace

std::unique_ptr<Model> Model::LoadTensorParallel(const std::string& dir, const LoadOptions& options) {
  const int n = options.tensor_parallel_size;
  if (n < 1) throw vt::Error(vt::StrCat("--tensor-parallel-size ", n, " must be >= 1"));
  const ModelConfig config = ModelConfig::FromDir(dir);
  const QuantConfig quant = ResolveQuantization(QuantConfig::FromDir(dir), options.quantization, dir);
  CheckSplittable(dir, config, quant, n);
  VT_CHECK(options.observer == nullptr, "--tensor-parallel-size ", n, ": calibration runs on one rank");
  std::vector<std::shared_ptr<vt::Communicator>> comms;
  LoadOptions rank_options = options;
  rank_options.tensor_parallel_size = 1;
  std::vector<vt::Device> devices;
  if (options.device.is_cuda()) {
    const int count = vt::CudaDeviceCount();
    if (options.device.index + n > count)
      throw vt::Error(vt::StrCat("--tensor-parallel-size ", n, " from cuda:", options.device.index, " needs ", n,
                                 " CUDA devices but ", count - options.device.index < 0 ? 0 : count - options.device.index,
                                 " are present (", count, " visible)"));
    std::vector<int> ids;
    for (int r = 0; r < n; ++r) ids.push_back(options.device.index + r);
    comms = vt::MakeNcclGroup(ids);
    for (int id : ids) devices.push_back(vt::Device{vt::DeviceType::kCUDA, id});
  } else {
    comms = vt::MakeInProcessGroup(n);
    if (rank_options.cpu_threads <= 0)
      rank_options.cpu_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / n);
    devices.assign(static_cast<size_t>(n), options.device);
  }
  std::unique_ptr<Model> root;
  for (int r = 0; r < n; ++r) {
    LoadOptions o = rank_options;
    o.device = devices[static_cast<size_t>(r)];
    o.progress = options.progress && r == 0;
    std::unique_ptr<Model> m = LoadRank(dir, o, TensorParallel{r, n}, comms[static_cast<size_t>(r)]);
    if (r == 0)
      root = std::move(m);
    else
      root->peers_.push_back(std::move(m));
  }
  root->workers_ = std::make_shared<Workers>(n - 1);
  return root;
}

vt::Tensor Model::ExecuteTensorParallel(const StepInput& step, const KvCacheTensors& cache) {
  // Checked once here so that a bad step fails before any rank enters a collective.
  CheckStep(step, cache);
  const std::vector<KvCacheTensors>& shards = cache.peer_shards();
  VT_CHECK(shards.size() == peers_.size(), "Execute: a model split over ", tensor_parallel_size(),
           " ranks needs a cache made by its MakeKvCacheTensors/MakeKvCache (one shard per rank), got ",
           shards.size() + 1, " shards");
  workers_->Start([&](size_t i) {
    try {
      peers_[i]->ExecuteLocal(step, shards[i]);
    } catch (const std::exception& e) {
      vt::AbortGroup(*peers_[i]->comm_, vt::StrCat("rank ", i + 1, " failed: ", e.what()));
      throw;
    }
  });
  vt::Tensor logits;
  std::exception_ptr error;
  try {
    logits = ExecuteLocal(step, cache);
  } catch (...) {
    error = std::current_exception();
    vt::AbortGroup(*comm_, "rank 0 failed");  // the others stop waiting at their collectives
  }
  if (std::exception_ptr e = workers_->Wait()) {
    if (!error) error = e;
  }
  if (error) std::rethrow_exception(error);
  return logits;
}

}  // namespace vtllm::model
