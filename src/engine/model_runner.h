// What runs a schedule: turns the scheduled requests into one model step (StepInput over the
// KV blocks the manager assigned), samples the rows that complete a sequence, and computes
// requested prompt logprobs. Executor is the seam the scheduler tests fill with a fake.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request_state.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/step_input.h"
#include "vt/transfer.h"

namespace vtllm::engine {

using RequestTable = std::unordered_map<std::string, std::unique_ptr<Request>>;

struct StepResult {
  // Per scheduled request, in SchedulerOutput order: the sampled token when this step
  // computed the request's last token, nullopt for a prefill chunk that did not.
  std::vector<std::optional<SampledToken>> sampled;
  // Per scheduled request: prompt logprobs of the positions this step covered (in order).
  std::vector<std::vector<PositionLogprobs>> prompt_logprobs;
};

class Executor {
 public:
  virtual ~Executor() = default;
  // `requests` holds every scheduled request (read-only here).
  virtual StepResult Execute(const SchedulerOutput& schedule, const RequestTable& requests) = 0;
  // Execute in two halves: Launch starts the step, Collect returns the oldest launched
  // step's result. By default Launch runs the whole step.
  virtual void Launch(const SchedulerOutput& schedule, const RequestTable& requests) {
    done_.push_back(Execute(schedule, requests));
  }
  virtual StepResult Collect() {
    StepResult r = std::move(done_.front());
    done_.pop_front();
    return r;
  }
  // Whether a launched step may take as input the tokens the step launched before it drew,
  // before they are collected (async scheduling: a request's placeholders).
  virtual bool TakesDeviceTokens() const { return false; }
  // A request left the engine (finished, aborted): drop what is kept for it.
  virtual void Forget(const std::string& request_id) = 0;

 private:
  std::deque<StepResult> done_;
};

class ModelRunner final : public Executor {
 public:
  // Allocates the KV tensors of `num_blocks` blocks (and, for a hybrid model, the recurrent
  // state of `num_state_slots` slots) and the step buffers once.
  ModelRunner(std::shared_ptr<model::Model> model, int64_t num_blocks, int64_t block_size,
              const model::StepLimits& limits, int64_t num_state_slots = 0);
  const model::KvCacheTensors& cache() const { return cache_; }
  StepResult Execute(const SchedulerOutput& schedule, const RequestTable& requests) override;
  // Enqueues the step's model work and draw and returns; a request whose last scheduled
  // token is a placeholder reads it from the draw of the step launched before.
  void Launch(const SchedulerOutput& schedule, const RequestTable& requests) override;
  StepResult Collect() override;
  bool TakesDeviceTokens() const override;
  void Forget(const std::string& request_id) override { tables_.erase(request_id); }

 private:
  // A launched step: what Collect fills in.
  struct Pending {
    StepResult result;
    std::vector<size_t> sample_of;  // scheduled index of each sampled row
    vt::Event done;                 // the model's work (steps that sample nothing)
  };
  std::shared_ptr<model::Model> model_;
  int64_t block_size_;
  model::KvCacheTensors cache_;
  Sampler sampler_;
  std::unordered_map<std::string, std::vector<int32_t>> tables_;  // block table per request
  model::StepInput step_;
  std::vector<SamplingRow> rows_;
  std::vector<std::vector<int32_t>> banned_;  // per sampled row, this step's masked ids
  std::deque<Pending> pending_;
  // The sampled row of each request in the last launched step that drew (sampled_ids()).
  std::unordered_map<std::string, int32_t> last_rows_;
  std::vector<int32_t> tokens_;  // a sequence's new tokens, placeholders as 0
};

}  // namespace vtllm::engine
