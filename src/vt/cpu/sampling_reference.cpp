#include "vt/cpu/sampling_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "vt/ops/sampling.h"

namespace vt::cpu::ref {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float RowMax(const float* x, int64_t V) {
  float m = kNegInf;
  for (int64_t i = 0; i < V; ++i) m = std::max(m, x[i]);
  return m;
}

// The unnormalised probability of a token of value v in a row whose max is m.
// exp in double rounded to f32: the CPU's and CUDA's double exp differ by far less than
// the f32 rounding, so both backends get the same f32 nearly always.
float Prob(float v, float m) { return v == m ? 1.0f : static_cast<float>(std::exp(double{v - m})); }

}  // namespace

void TopKLogprobsRow(const float* x, int64_t V, int32_t target, int64_t k, int32_t* top_ids, float* top_logprobs,
                     float* target_logprob, int32_t* target_rank) {
  const float m = RowMax(x, V);
  double s = 0;
  for (int64_t i = 0; i < V; ++i) s += Prob(x[i], m);
  const double log_s = std::log(s);
  auto logprob = [&](int64_t i) {
    return x[i] == m ? static_cast<float>(-log_s) : static_cast<float>((double{x[i]} - double{m}) - log_s);
  };
  *target_logprob = logprob(target);
  int32_t rank = 1;
  for (int64_t i = 0; i < V; ++i) rank += x[i] > x[target] ? 1 : 0;
  *target_rank = rank;
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  for (int64_t j = 0; j < k; ++j) {
    top_ids[j] = order[j];
    top_logprobs[j] = logprob(order[j]);
  }
}

void LogitsMaskRow(float* x, int64_t V, const int32_t* allowed, int64_t na, const int32_t* banned, int64_t nb) {
  if (na > 0) {
    for (int64_t i = 0; i < V; ++i)
      if (!std::binary_search(allowed, allowed + na, static_cast<int32_t>(i))) x[i] = kNegInf;
  }
  for (int64_t j = 0; j < nb; ++j) x[banned[j]] = kNegInf;
}

void LogitsAddSparseRow(float* x, const int32_t* ids, const float* values, int64_t n) {
  for (int64_t j = 0; j < n; ++j) x[ids[j]] += values[j];
}

void LogitsPenaltiesRow(float* x, const int32_t* ids, const int32_t* counts, int64_t n, float repetition,
                        float frequency, float presence) {
  for (int64_t j = 0; j < n; ++j) {
    float v = x[ids[j]];
    v = v > 0 ? v / repetition : v * repetition;
    v -= frequency * static_cast<float>(counts[j]);
    if (counts[j] > 0) v -= presence;
    x[ids[j]] = v;
  }
}

int32_t SampleRow(const float* x, int64_t V, float temperature, float top_p, float min_p, int32_t top_k,
                  uint64_t random_bits) {
  if (temperature < kGreedyTemperature) {
    int32_t best = 0;
    float best_v = kNegInf;
    for (int64_t i = 0; i < V; ++i)
      if (x[i] > best_v) best_v = x[i], best = static_cast<int32_t>(i);
    return best;
  }
  std::vector<float> xs(static_cast<size_t>(V)), p(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) xs[i] = x[i] / temperature;
  const float m = RowMax(xs.data(), V);
  for (int64_t i = 0; i < V; ++i) p[i] = Prob(xs[i], m);
  std::vector<char> keep(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) keep[i] = p[i] >= min_p;
  if (top_k > 0 && top_k < V) {
    std::vector<float> sorted = xs;
    std::sort(sorted.begin(), sorted.end(), [](float a, float b) { return a > b; });
    const float kth = sorted[top_k - 1];
    for (int64_t i = 0; i < V; ++i) keep[i] = keep[i] && xs[i] >= kth;
  }
  if (top_p < 1.0f) {
    double total = 0;
    std::vector<int32_t> kept;
    for (int64_t i = 0; i < V; ++i) {
      if (keep[i]) total += p[i];
      if (keep[i]) kept.push_back(static_cast<int32_t>(i));
    }
    std::sort(kept.begin(), kept.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    const double need = double{top_p} * total;
    float p_star = 0;
    double cum = 0;
    for (size_t j = 0; j < kept.size();) {
      const float v = p[kept[j]];
      for (; j < kept.size() && p[kept[j]] == v; ++j) cum += p[kept[j]];
      p_star = v;
      if (cum >= need) break;
    }
    for (int64_t i = 0; i < V; ++i) keep[i] = keep[i] && p[i] >= p_star;
  }
  double mass = 0;
  for (int64_t i = 0; i < V; ++i)
    if (keep[i]) mass += p[i];
  const double target = SampleUniform(random_bits) * mass;
  double cum = 0;
  int32_t last = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (!keep[i]) continue;
    cum += p[i];
    last = static_cast<int32_t>(i);
    if (cum > target) return last;
  }
  return last;
}

}  // namespace vt::cpu::ref
