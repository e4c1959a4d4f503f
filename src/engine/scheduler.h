// The scheduler (vLLM V1): one token budget per step, no prefill/decode phases. Running
// requests are served first (a decode token, or the next prefill chunk), then waiting ones
// (only when nothing was preempted this step). When a running request cannot get a block, the
// lowest-ranked running request is preempted: its blocks are freed, its computed tokens reset
// to 0, and it goes to the front of the waiting queue, to be recomputed when resumed (prefix
// hits make that cheap).
//
// The schedule is plain data (SchedulerOutput); results come back through the engine, which
// appends sampled tokens and calls FinishRequest.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/request_state.h"

namespace vtllm::engine {

enum class SchedulingPolicy;

struct SchedulerConfig {
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 2048;
  int64_t long_prefill_token_threshold = 0;  // 0: no cap per request and step
  bool priority = false;                     // policy "priority" (else fcfs)
};

struct ScheduledRequest {
  std::string request_id;
  int64_t num_computed_tokens = 0;  // tokens before this step's (= position of the first new one)
  int64_t num_new_tokens = 0;
  // A request scheduled for the first time or resumed after preemption: its whole block table
  // (prefix hits first). Otherwise: the blocks appended to its table this step.
  bool is_new = false;
  std::vector<int32_t> block_ids;
  int32_t state_slot = -1;  // its recurrent-state slot (hybrid models), -1: none
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  // running ones first, in schedule order
  std::vector<std::string> preempted;       // preempted this step (the runner drops their state)
  int64_t num_scheduled_tokens = 0;
  bool empty() const { return scheduled.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv);

  void AddRequest(Request* req);
  SchedulerOutput Schedule();
  // Removes a request from the queues and frees its blocks (finished or aborted).
  void FinishRequest(Request* req, FinishReason reason);

  const std::vector<Request*>& running() const { return running_; }
  const std::deque<Request*>& waiting() const { return waiting_; }
  uint64_t num_preemptions() const { return num_preemptions_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  // The running request to preempt: the last one (fcfs), or the lowest-priority, latest
  // arrival (priority).
  size_t PickVictim() const;
  // The waiting request to schedule next: the front (fcfs), or the best (priority, arrival).
  size_t PickWaiting() const;
  void Preempt(size_t running_index, SchedulerOutput& out);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::vector<Request*> running_;
  std::deque<Request*> waiting_;
  uint64_t num_preemptions_ = 0;
};

}  // namespace vtllm::engine
