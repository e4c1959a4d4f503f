// The engine's counters, gauges and histograms, with the meanings of vLLM's Prometheus metrics
// (the server exports them under vLLM's names: vllm:num_requests_running, ...).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace vtllm::engine {

// A cumulative histogram: counts[i] observations <= bounds[i], and one more bucket (+Inf).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds = {});
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Non-cumulative count per bucket; size bounds().size() + 1 (the last is +Inf).
  const std::vector<uint64_t>& bucket_counts() const { return counts_; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

// vLLM's bucket bounds for each histogram.
std::vector<double> TimeToFirstTokenBuckets();
std::vector<double> InterTokenLatencyBuckets();
std::vector<double> RequestLatencyBuckets();  // e2e and queue time
std::vector<double> TokenCountBuckets(int64_t max_model_len);  // 1, 2, 5, 10, 20, 50, ... up to it

struct EngineMetrics {
  // Gauges.
  int64_t num_requests_running = 0;
  int64_t num_requests_waiting = 0;
  double kv_cache_usage = 0;  // used blocks / all blocks, in [0, 1]
  int64_t num_kv_blocks = 0;
  // Counters.
  uint64_t prompt_tokens = 0;      // prompt tokens computed (prefix-cache hits excluded)
  uint64_t generation_tokens = 0;
  uint64_t prefix_cache_queries = 0;  // tokens looked up
  uint64_t prefix_cache_hits = 0;     // tokens found
  uint64_t num_preemptions = 0;
  std::map<std::string, uint64_t> request_success;  // by finish reason: "stop", "length", "abort"
  uint64_t steps = 0;
  uint64_t steps_launched_ahead = 0;  // async scheduling: launched before the step before was collected
  // Histograms (seconds, or tokens).
  Histogram time_to_first_token{TimeToFirstTokenBuckets()};
  Histogram inter_token_latency{InterTokenLatencyBuckets()};
  Histogram e2e_request_latency{RequestLatencyBuckets()};
  Histogram request_queue_time{RequestLatencyBuckets()};
  Histogram request_prompt_tokens;
  Histogram request_generation_tokens;
};

}  // namespace vtllm::engine
