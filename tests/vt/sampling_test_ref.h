// Test-side references of the sampling ops, written from the definitions in
// vt/ops/sampling.h (not from the kernels): filters stated as counts and masses of strictly
// better tokens, log-softmax in long double. Shared by the vt, CUDA and engine tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "vt/ops/sampling.h"

namespace sampling_ref {

inline constexpr float kInf = std::numeric_limits<float>::infinity();

struct Params {
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int32_t top_k = 0;
  uint64_t bits = 0;
};

// Normal(0, scale) logits, rounded to multiples of 1/64 when `ties` (many exact ties).
inline std::vector<float> RandomLogits(int64_t n, uint32_t seed, float scale = 2.0f, bool ties = false) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = ties ? std::round(d(gen) * 4.0f) / 4.0f : d(gen);
  return v;
}

// The token weights after the filters: 0 for a dropped token, else its unnormalised
// probability p = exp(x/T - max) rounded to f32 (1 for the max), as the definition states.
inline std::vector<double> KeptWeights(const std::vector<float>& logits, const Params& p) {
  const size_t V = logits.size();
  std::vector<float> xs(V), pr(V);
  float m = -kInf;
  for (size_t i = 0; i < V; ++i) xs[i] = logits[i] / p.temperature, m = std::max(m, xs[i]);
  for (size_t i = 0; i < V; ++i) pr[i] = xs[i] == m ? 1.0f : static_cast<float>(std::exp(double{xs[i] - m}));
  std::vector<char> in_s(V);
  for (size_t i = 0; i < V; ++i) {
    size_t better = 0;  // tokens with a strictly larger x
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < V)
      for (size_t j = 0; j < V; ++j) better += xs[j] > xs[i] ? 1 : 0;
    in_s[i] = pr[i] >= p.min_p &&
              (p.top_k <= 0 || static_cast<size_t>(p.top_k) >= V || better < static_cast<size_t>(p.top_k));
  }
  double total = 0;
  for (size_t i = 0; i < V; ++i)
    if (in_s[i]) total += pr[i];
  std::vector<double> w(V, 0.0);
  for (size_t i = 0; i < V; ++i) {
    if (!in_s[i]) continue;
    if (p.top_p < 1.0f) {
      // Kept while the tokens strictly more likely than it hold less than top_p of the mass.
      double above = 0;
      for (size_t j = 0; j < V; ++j)
        if (in_s[j] && pr[j] > pr[i]) above += pr[j];
      if (!(above < double{p.top_p} * total)) continue;
    }
    w[i] = pr[i];
  }
  return w;
}

// The token of the draw with uniform u over weights w (inverse CDF in id order).
inline int32_t Draw(const std::vector<double>& w, uint64_t bits) {
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  const double target = vt::SampleUniform(bits) * total;
  double cum = 0;
  int32_t last = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == 0) continue;
    cum += w[i];
    last = static_cast<int32_t>(i);
    if (cum > target) return last;
  }
  return last;
}

inline int32_t Argmax(const std::vector<float>& x) {
  int32_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[best]) best = static_cast<int32_t>(i);
  return best;
}

inline int32_t Sample(const std::vector<float>& logits, const Params& p) {
  if (p.temperature < vt::kGreedyTemperature) return Argmax(logits);
  return Draw(KeptWeights(logits, p), p.bits);
}

// Log-softmax in long double (a row of -inf only: uniform).
inline std::vector<double> LogSoftmax(const std::vector<float>& x) {
  const long double m = *std::max_element(x.begin(), x.end());
  if (std::isinf(m) && m < 0) return std::vector<double>(x.size(), -std::log(static_cast<double>(x.size())));
  long double s = 0;
  for (float v : x) s += std::exp(static_cast<long double>(v) - m);
  std::vector<double> lp(x.size());
  for (size_t i = 0; i < x.size(); ++i) lp[i] = static_cast<double>(static_cast<long double>(x[i]) - m - std::log(s));
  return lp;
}

inline int32_t Rank(const std::vector<float>& x, int32_t t) {
  int32_t better = 0;
  for (float v : x) better += v > x[t] ? 1 : 0;
  return better + 1;
}

// The k most likely ids, ties by lower id.
inline std::vector<int32_t> TopIds(const std::vector<float>& x, int64_t k) {
  std::vector<int32_t> ids(x.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return x[a] != x[b] ? x[a] > x[b] : a < b; });
  ids.resize(static_cast<size_t>(k));
  return ids;
}

// vLLM's penalties on one row; counts[t] = occurrences in the output, seen[t] = in the prompt
// or the output.
inline void Penalize(std::vector<float>& x, const std::vector<int>& counts, const std::vector<char>& seen, float rp,
                     float f, float pres) {
  for (size_t t = 0; t < x.size(); ++t) {
    if (seen[t]) x[t] = x[t] > 0 ? x[t] / rp : x[t] * rp;
    x[t] -= f * static_cast<float>(counts[t]);
    if (counts[t] > 0) x[t] -= pres;
  }
}

}  // namespace sampling_ref
