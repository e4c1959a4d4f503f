// The engine: requests in, tokens and text out, one flattened step at a time (vLLM V1).
//
//   Engine engine(EngineConfig{.model_dir = dir});
//   engine.AddRequest({.request_id = "a", .prompt_token_ids = ids});
//   while (engine.HasUnfinished())
//     for (const RequestOutput& out : engine.Step()) ...
//
// Engine is single-threaded: AddRequest, Abort and Step are called from one thread.
// AsyncEngine runs an Engine on a thread of its own for the server and the C ABI.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/metrics.h"
#include "engine/request.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace vtllm::engine {

enum class SchedulingPolicy { kFcfs, kPriority };
class Executor;

// The serve flags (DESIGN.md) that shape the engine; 0 / nullopt: a default chosen at start-up
// and reported by Engine::config().
struct EngineConfig {
  std::string model_dir;              // checkpoint directory
  model::LoadOptions load;            // device, dtype, threads, ISA
  int64_t max_model_len = 0;          // 0: the model's max_position_embeddings
  int64_t max_num_seqs = 0;           // 0: 256 on CUDA, 64 on CPU
  int64_t max_num_batched_tokens = 0; // 0: 8192 on CUDA, 2048 on CPU (and >= max_num_seqs)
  int64_t long_prefill_token_threshold = 0;  // 0: no cap on one request's prefill chunk
  int64_t block_size = 16;
  int64_t kv_cache_memory_bytes = 0;  // 0: CPU: a quarter of available memory, capped
  double gpu_memory_utilization = 0.9;
  bool enable_prefix_caching = true;
  SchedulingPolicy scheduling_policy = SchedulingPolicy::kFcfs;
  uint64_t seed = 0;                  // the generator of requests without a seed of their own
  bool use_generation_config = true;  // --generation-config auto (false: vllm's neutral defaults)
  int max_logprobs = 20;
  int max_n = 128;
  // Async scheduling (vLLM's --async-scheduling): the next step is scheduled and launched
  // before the running step's tokens reach the host, its decode inputs taken from the
  // running step's draw on the device, so the device does not wait for the host between
  // steps. nullopt: on with CUDA, off on CPU (where an op is done when it returns, so
  // nothing overlaps). Requests whose draw needs their last tokens on the host (penalties,
  // bad words, structured outputs) make the engine wait for them first.
  std::optional<bool> async_scheduling;
};

class Engine {
 public:
  // Loads the model and the tokenizer (when the directory has one) and sizes the KV cache;
  // throws vt::Error when one max_model_len sequence cannot fit.
  explicit Engine(const EngineConfig& config);
  // An engine over a model already loaded (tests, tools); tokenizer may be absent (then no
  // text, no stop strings and no bad words).
  Engine(const EngineConfig& config, std::shared_ptr<model::Model> model, std::optional<Tokenizer> tokenizer);
  // The same with another executor of the schedules (tests: a fake model runner); the model
  // then only supplies its config and KV sizes.
  Engine(const EngineConfig& config, std::shared_ptr<model::Model> model, std::optional<Tokenizer> tokenizer,
         std::unique_ptr<Executor> executor);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request; throws RequestError naming the field on bad input and
  // keeps nothing of it then.
  void AddRequest(EngineRequest request);
  // The checks AddRequest makes, without adding: safe from any thread.
  void ValidateRequest(const EngineRequest& request) const;
  // Finishes a request at once (finish reason abort, reported by the next Step) and frees its
  // blocks; unknown ids are ignored (the request may have just finished).
  void Abort(const std::string& request_id);
  // Schedules and runs one step; returns the outputs of the requests that made progress or
  // finished.
  std::vector<RequestOutput> Step();
  bool HasUnfinished() const;

  // The defaults a request's unset fields take (from generation_config.json unless disabled).
  const SamplingParams& default_params() const;
  const EngineConfig& config() const;  // with the defaults resolved
  const model::Model& model() const;
  const std::optional<Tokenizer>& tokenizer() const;
  int64_t max_model_len() const;
  EngineMetrics metrics() const;
  int64_t num_free_blocks() const;
  int64_t num_total_blocks() const;
  // Recurrent-state slots of a hybrid model (0 for other models).
  int64_t num_state_slots() const;
  int64_t num_free_state_slots() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// One request's outputs as the engine thread produces them, for one consumer.
class RequestStream {
 public:
  // Waits up to `timeout` for the next output; nullopt on time-out or once the stream has
  // delivered its last output (then finished() is true).
  std::optional<RequestOutput> Next(std::chrono::milliseconds timeout);
  bool finished() const;
  const std::string& request_id() const { return id_; }

  explicit RequestStream(std::string id) : id_(std::move(id)) {}
  void Push(RequestOutput out);  // the engine thread's side

 private:
  std::string id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool done_ = false;       // the last output was pushed
  bool delivered_ = false;  // ... and taken
};

// An Engine on its own thread. Submit and Abort are safe from any thread.
class AsyncEngine {
 public:
  explicit AsyncEngine(const EngineConfig& config);
  AsyncEngine(const EngineConfig& config, std::shared_ptr<model::Model> model, std::optional<Tokenizer> tokenizer);
  ~AsyncEngine();  // aborts what runs and joins the thread

  // Validates on the caller's thread (RequestError on bad input), then queues the request.
  // `request_id` empty: one is made up. Throws vt::Error once the engine has died.
  std::shared_ptr<RequestStream> Submit(EngineRequest request);
  void Abort(const std::string& request_id);
  // Stops taking requests; waits up to `timeout` for running ones, then aborts the rest.
  void Shutdown(std::chrono::milliseconds timeout);

  bool healthy() const;  // false once a step failed in a way that leaves the engine unusable
  EngineMetrics metrics() const;
  const Engine& engine() const { return *engine_; }  // read-only facts (config, tokenizer)

 private:
  void Loop();

  std::unique_ptr<Engine> engine_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<EngineRequest> incoming_;
  std::vector<std::string> aborts_;
  std::unordered_map<std::string, std::weak_ptr<RequestStream>> streams_;
  EngineMetrics metrics_;
  bool stopping_ = false, accepting_ = true, dead_ = false;
  uint64_t next_id_ = 0;
  std::thread thread_;
};

}  // namespace vtllm::engine
