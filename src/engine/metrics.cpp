#include "engine/metrics.h"

#include <algorithm>

namespace vtllm::engine {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::Observe(double v) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  ++count_;
  sum_ += v;
}

// The bucket bounds of vLLM's metrics (vllm/v1/metrics/loggers.py).
std::vector<double> TimeToFirstTokenBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
          80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> InterTokenLatencyBuckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}

std::vector<double> RequestLatencyBuckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
          960.0, 1920.0, 7680.0};
}

std::vector<double> TokenCountBuckets(int64_t max_model_len) {
  std::vector<double> b;
  for (double scale = 1;; scale *= 10)
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = m * scale;
      if (v > static_cast<double>(max_model_len)) return b;
      b.push_back(v);
    }
}

}  // namespace vtllm::engine
