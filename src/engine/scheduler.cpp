#include "engine/scheduler.h"

#include <algorithm>
#include <unordered_map>

#include "vt/error.h"

namespace vtllm::engine {

namespace {

// Rank for the priority policy: smaller runs first (lower priority value, then earlier arrival).
bool RanksBefore(const Request* a, const Request* b) {
  if (a->priority != b->priority) return a->priority < b->priority;
  return a->arrival_time < b->arrival_time;
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv) : config_(config), kv_(kv) {
  VT_CHECK(config.max_num_seqs > 0 && config.max_num_batched_tokens > 0 && config.max_model_len > 0,
           "Scheduler: max_num_seqs ", config.max_num_seqs, ", max_num_batched_tokens ",
           config.max_num_batched_tokens, " and max_model_len ", config.max_model_len, " must be > 0");
}

void Scheduler::AddRequest(Request* req) {
  req->status = RequestStatus::kWaiting;
  waiting_.push_back(req);
}

size_t Scheduler::PickVictim() const {
  if (!config_.priority) return running_.size() - 1;
  size_t worst = 0;
  for (size_t i = 1; i < running_.size(); ++i)
    if (!RanksBefore(running_[i], running_[worst])) worst = i;  // ties: the later one
  return worst;
}

size_t Scheduler::PickWaiting() const {
  if (!config_.priority) return 0;
  size_t best = 0;
  for (size_t i = 1; i < waiting_.size(); ++i)
    if (RanksBefore(waiting_[i], waiting_[best])) best = i;
  return best;
}

void Scheduler::Preempt(size_t running_index, SchedulerOutput& out) {
  Request* victim = running_[running_index];
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(running_index));
  kv_.Free(*victim);
  victim->status = RequestStatus::kPreempted;
  victim->num_computed_tokens = 0;
  ++victim->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(victim);
  out.preempted.push_back(victim->id);
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;
  // Per request scheduled this step: tokens, and the blocks appended (for running ones).
  std::vector<Request*> order;
  std::unordered_map<Request*, int64_t> num_new;
  std::unordered_map<Request*, std::vector<int32_t>> appended;
  std::unordered_map<Request*, bool> is_new;

  auto cap = [&](const Request* r, int64_t n) {
    if (config_.long_prefill_token_threshold > 0) n = std::min(n, config_.long_prefill_token_threshold);
    if (r->max_chunk_tokens > 0) n = std::min(n, r->max_chunk_tokens);
    n = std::min(n, budget);
    return std::min(n, config_.max_model_len - r->num_computed_tokens);
  };

  // 1. Running requests, in order.
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Request* req = running_[i];
    // Async scheduling: a request whose draw in flight ends it (max_tokens, max_model_len)
    // gets no step after that draw.
    if (req->num_placeholders > 0 && (req->num_output_tokens() + req->num_placeholders >= req->max_tokens ||
                                      req->num_tokens_with_placeholders() >= config_.max_model_len)) {
      ++i;
      continue;
    }
    const int64_t n = cap(req, req->num_tokens_with_placeholders() - req->num_computed_tokens);
    if (n <= 0) {
      ++i;
      continue;
    }
    bool scheduled = false;
    while (true) {
      std::optional<std::vector<int32_t>> blocks = kv_.AllocateSlots(*req, n);
      if (blocks) {
        appended[req] = std::move(*blocks);
        scheduled = true;
        break;
      }
      const size_t v = PickVictim();
      Request* victim = running_[v];
      if (num_new.count(victim)) {  // scheduled earlier this step (priority policy): undo it
        budget += num_new[victim];
        num_new.erase(victim);
        appended.erase(victim);
        order.erase(std::find(order.begin(), order.end(), victim));
      }
      Preempt(v, out);
      if (v < i) --i;
      if (victim == req) break;
    }
    if (!scheduled) break;
    order.push_back(req);
    num_new[req] = n;
    is_new[req] = false;
    budget -= n;
    ++i;
  }

  // 2. Waiting requests, only when nothing was preempted this step.
  if (out.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
      const size_t w = PickWaiting();
      Request* req = waiting_[w];
      VT_CHECK(req->num_placeholders == 0, "Scheduler: waiting request ", req->id, " has a draw in flight");
      ComputedBlocks hits;
      if (req->num_computed_tokens == 0) hits = kv_.GetComputedBlocks(*req);
      const int64_t n = cap(req, req->num_tokens() - req->num_computed_tokens - hits.num_tokens);
      if (n <= 0) break;
      std::optional<std::vector<int32_t>> blocks = kv_.AllocateSlots(*req, n, &hits);
      if (!blocks) break;  // no room: it waits, and so do the ones behind it
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
      req->num_computed_tokens += hits.num_tokens;
      if (req->num_cached_tokens < 0) req->num_cached_tokens = hits.num_tokens;
      req->status = RequestStatus::kRunning;
      running_.push_back(req);
      order.push_back(req);
      num_new[req] = n;
      is_new[req] = true;
      budget -= n;
    }
  }

  for (Request* req : order) {
    ScheduledRequest s;
    s.request_id = req->id;
    s.num_computed_tokens = req->num_computed_tokens;
    s.num_new_tokens = num_new[req];
    s.is_new = is_new[req];
    s.block_ids = s.is_new ? kv_.BlockTable(req->id) : std::move(appended[req]);
    s.state_slot = kv_.StateSlot(req->id);
    req->num_computed_tokens += s.num_new_tokens;
    out.num_scheduled_tokens += s.num_new_tokens;
    out.scheduled.push_back(std::move(s));
  }
  return out;
}

void Scheduler::FinishRequest(Request* req, FinishReason reason) {
  if (req->finished()) return;
  auto r = std::find(running_.begin(), running_.end(), req);
  if (r != running_.end()) running_.erase(r);
  auto w = std::find(waiting_.begin(), waiting_.end(), req);
  if (w != waiting_.end()) waiting_.erase(w);
  kv_.Free(*req);
  req->status = RequestStatus::kFinished;
  if (!req->finish_reason) req->finish_reason = reason;
}

}  // namespace vtllm::engine
