// What runs a schedule: turns the scheduled requests into one model step (StepInput over the
// KV blocks the manager assigned), samples the rows that complete a sequence, and computes
// requested prompt logprobs. Executor is the seam the scheduler tests fill with a fake.
#pragma once

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
  // A request left the engine (finished, aborted): drop what is kept for it.
  virtual void Forget(const std::string& request_id) = 0;
};

class ModelRunner final : public Executor {
 public:
  // Allocates the KV tensors of `num_blocks` blocks (and, for a hybrid model, the recurrent
  // state of `num_state_slots` slots) and the step buffers once.
  ModelRunner(std::shared_ptr<model::Model> model, int64_t num_blocks, int64_t block_size,
              const model::StepLimits& limits, int64_t num_state_slots = 0);
  const model::KvCacheTensors& cache() const { return cache_; }
  StepResult Execute(const SchedulerOutput& schedule, const RequestTable& requests) override;
  void Forget(const std::string& request_id) override { tables_.erase(request_id); }

 private:
  std::shared_ptr<model::Model> model_;
  int64_t block_size_;
  model::KvCacheTensors cache_;
  Sampler sampler_;
  std::unordered_map<std::string, std::vector<int32_t>> tables_;  // block table per request
  model::StepInput step_;
  std::vector<SamplingRow> rows_;
  std::vector<std::vector<int32_t>> banned_;  // per sampled row, this step's masked ids
};

}  // namespace vtllm::engine
