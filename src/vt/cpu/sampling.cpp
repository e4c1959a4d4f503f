// CPU kernels of the sampling ops (vt/ops/sampling.h), parallel over rows. The sparse
// ops run the scalar reference row functions (they touch only the listed tokens); the
// selections avoid sorting the vocabulary: TopKLogprobs keeps the best K in one pass, top_k
// uses nth_element, top_p sorts only the tokens above a histogram estimate of its cut.
// Sums run in id order (and top_p's in descending-probability order) exactly as in the
// reference, so every kernel returns the reference's result bit for bit.
#include "vt/ops/sampling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "vt/cpu/backend.h"
#include "vt/cpu/sampling_reference.h"

namespace vt::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Checks a CSR offsets tensor against its entries (count nnz) and returns its data.
const int32_t* CheckedOffsets(std::string_view op, std::string_view name, const Tensor& offsets, int64_t nnz) {
  const auto* o = offsets.data_as<int32_t>();
  const int64_t R = offsets.dim(0) - 1;
  VT_CHECK(o[0] == 0, op, ": ", name, "[0] = ", o[0], " but must be 0");
  for (int64_t r = 0; r < R; ++r)
    VT_CHECK(o[r + 1] >= o[r], op, ": ", name, " decreases at row ", r, " (", o[r], " then ", o[r + 1], ")");
  VT_CHECK(o[R] <= nnz, op, ": ", name, "[", R, "] = ", o[R], " but only ", nnz, " entries are given");
  return o;
}

void CheckIds(std::string_view op, std::string_view name, const Tensor& ids, int64_t n, int64_t V) {
  const auto* p = ids.data_as<int32_t>();
  for (int64_t j = 0; j < n; ++j)
    VT_CHECK(p[j] >= 0 && p[j] < V, op, ": ", name, "[", j, "] = ", p[j], " is outside the vocabulary [0, ", V, ")");
}

// Rows run in parallel, a few per chunk: each row is O(V) work.
template <typename Fn>
void ForRows(const Queue& q, int64_t R, Fn&& fn) {
  Cpu(q).pool.ParallelFor(R, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) fn(r);
  });
}

void TopKLogprobsCpu(const Queue& q, const Tensor& logits, const Tensor& targets, const Tensor& top_ids,
                     const Tensor& top_logprobs, const Tensor& target_logprobs, const Tensor& target_ranks) {
  constexpr std::string_view op = "TopKLogprobs";
  const int64_t R = logits.dim(0), V = logits.dim(1), K = top_ids.dim(1);
  CheckIds(op, "targets", targets, R, V);
  const float* x0 = logits.data_as<float>();
  const int32_t* tg = targets.data_as<int32_t>();
  ForRows(q, R, [&](int64_t r) {
    const float* x = x0 + r * V;
    float m = kNegInf;
    for (int64_t i = 0; i < V; ++i) m = std::max(m, x[i]);
    double s = 0;
    for (int64_t i = 0; i < V; ++i) s += x[i] == m ? 1.0f : static_cast<float>(std::exp(double{x[i] - m}));
    const double log_s = std::log(s);
    auto logprob = [&](int64_t i) {
      return x[i] == m ? static_cast<float>(-log_s) : static_cast<float>((double{x[i]} - double{m}) - log_s);
    };
    const int32_t t = tg[r];
    int32_t rank = 1;
    for (int64_t i = 0; i < V; ++i) rank += x[i] > x[t] ? 1 : 0;
    target_ranks.data_as<int32_t>()[r] = rank;
    target_logprobs.data_as<float>()[r] = logprob(t);
    if (K == 0) return;
    // The K most likely, ties by lower id: for small K one pass keeping the best K in order,
    // else a selection and a sort of the K.
    const auto before = [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
    thread_local std::vector<int32_t> best;
    best.clear();
    if (K > 64) {
      best.resize(static_cast<size_t>(V));
      for (int64_t i = 0; i < V; ++i) best[i] = static_cast<int32_t>(i);
      if (K < V) std::nth_element(best.begin(), best.begin() + (K - 1), best.end(), before);
      std::sort(best.begin(), best.begin() + K, before);
    }
    for (int64_t i = 0; i < V && K <= 64; ++i) {
      const auto id = static_cast<int32_t>(i);
      if (static_cast<int64_t>(best.size()) == K) {
        if (!before(id, best.back())) continue;
        best.pop_back();
      }
      best.insert(std::upper_bound(best.begin(), best.end(), id, before), id);
    }
    for (int64_t j = 0; j < K; ++j) {
      top_ids.data_as<int32_t>()[r * K + j] = best[j];
      top_logprobs.data_as<float>()[r * K + j] = logprob(best[j]);
    }
  });
}

void LogitsMaskCpu(const Queue& q, const Tensor& logits, const Tensor& allowed_offsets, const Tensor& allowed_ids,
                   const Tensor& banned_offsets, const Tensor& banned_ids) {
  constexpr std::string_view op = "LogitsMask";
  const int64_t R = logits.dim(0), V = logits.dim(1);
  const int32_t* ao = CheckedOffsets(op, "allowed_offsets", allowed_offsets, allowed_ids.dim(0));
  const int32_t* bo = CheckedOffsets(op, "banned_offsets", banned_offsets, banned_ids.dim(0));
  CheckIds(op, "allowed_ids", allowed_ids, ao[R], V);
  CheckIds(op, "banned_ids", banned_ids, bo[R], V);
  const int32_t* a = allowed_ids.data_as<int32_t>();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = ao[r] + 1; j < ao[r + 1]; ++j)
      VT_CHECK(a[j] > a[j - 1], op, ": allowed_ids of row ", r, " must be ascending and distinct, but entry ", j,
               " is ", a[j], " after ", a[j - 1]);
  ForRows(q, R, [&](int64_t r) {
    ref::LogitsMaskRow(logits.data_as<float>() + r * V, V, a + ao[r], ao[r + 1] - ao[r],
                       banned_ids.data_as<int32_t>() + bo[r], bo[r + 1] - bo[r]);
  });
}

void LogitsAddSparseCpu(const Queue& q, const Tensor& logits, const Tensor& offsets, const Tensor& ids,
                        const Tensor& values) {
  constexpr std::string_view op = "LogitsAddSparse";
  const int64_t R = logits.dim(0), V = logits.dim(1);
  const int32_t* o = CheckedOffsets(op, "offsets", offsets, ids.dim(0));
  CheckIds(op, "ids", ids, o[R], V);
  ForRows(q, R, [&](int64_t r) {
    ref::LogitsAddSparseRow(logits.data_as<float>() + r * V, ids.data_as<int32_t>() + o[r],
                            values.data_as<float>() + o[r], o[r + 1] - o[r]);
  });
}

void LogitsPenaltiesCpu(const Queue& q, const Tensor& logits, const Tensor& offsets, const Tensor& ids,
                        const Tensor& counts, const Tensor& penalties) {
  constexpr std::string_view op = "LogitsPenalties";
  const int64_t R = logits.dim(0), V = logits.dim(1);
  const int32_t* o = CheckedOffsets(op, "offsets", offsets, ids.dim(0));
  CheckIds(op, "ids", ids, o[R], V);
  const int32_t* c = counts.data_as<int32_t>();
  for (int64_t j = 0; j < o[R]; ++j) VT_CHECK(c[j] >= 0, op, ": counts[", j, "] = ", c[j], " is negative");
  const float* pen = penalties.data_as<float>();
  for (int64_t r = 0; r < R; ++r) {
    VT_CHECK(std::isfinite(pen[3 * r]) && pen[3 * r] > 0, op, ": penalties[", r, ", 0] (repetition) = ", pen[3 * r],
             " must be finite and > 0");
    VT_CHECK(std::isfinite(pen[3 * r + 1]) && std::isfinite(pen[3 * r + 2]), op, ": penalties[", r,
             "] (frequency, presence) = (", pen[3 * r + 1], ", ", pen[3 * r + 2], ") must be finite");
  }
  ForRows(q, R, [&](int64_t r) {
    ref::LogitsPenaltiesRow(logits.data_as<float>() + r * V, ids.data_as<int32_t>() + o[r], c + o[r], o[r + 1] - o[r],
                            pen[3 * r], pen[3 * r + 1], pen[3 * r + 2]);
  });
}

// p* of top_p (see SampleTokens) over the candidate ids `cand`, `need` being top_p times
// their mass. A histogram of the probabilities' bit patterns (monotone for p >= 0; 8 bits
// of exponent and 2 of mantissa per bucket) locates the crossing approximately; only the
// tokens of the buckets from one below it up are then sorted and walked exactly as the
// reference walks them (every tie group lies in one bucket, so groups are whole). If that
// walk falls short (rounding of the bucket sums), the walk is redone over every candidate.
float TopPThreshold(const std::vector<int32_t>& cand, const float* p, double need) {
  constexpr int kBuckets = 1024;  // p <= 1: bits >> 20 <= 0x3F8
  const auto bucket = [&](int32_t i) { return static_cast<int>(std::bit_cast<uint32_t>(p[i]) >> 20); };
  thread_local std::vector<double> mass;
  mass.assign(kBuckets, 0.0);
  for (int32_t i : cand) mass[bucket(i)] += p[i];
  int lo = 0;
  double acc = 0;
  for (int b = kBuckets - 1; b >= 0; --b) {
    acc += mass[b];
    if (acc >= need) {
      lo = std::max(b - 1, 0);
      break;
    }
  }
  thread_local std::vector<std::pair<float, int32_t>> top;
  for (;; lo = 0) {
    top.clear();
    for (int32_t i : cand)
      if (bucket(i) >= lo) top.emplace_back(p[i], i);
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    double cum = 0;
    float v = 0;
    for (size_t j = 0; j < top.size();) {
      v = top[j].first;
      for (; j < top.size() && top[j].first == v; ++j) cum += top[j].first;
      if (cum >= need) return v;
    }
    if (lo == 0) return v;  // rounding left the whole set short of `need`: keep it all
  }
}

int32_t SampleRowFast(const float* x, int64_t V, float temperature, float top_p, float min_p, int32_t top_k,
                      uint64_t bits) {
  if (temperature < kGreedyTemperature) {
    int32_t best = 0;
    float best_v = kNegInf;
    for (int64_t i = 0; i < V; ++i)
      if (x[i] > best_v) best_v = x[i], best = static_cast<int32_t>(i);
    return best;
  }
  thread_local std::vector<float> xs, p;
  thread_local std::vector<int32_t> cand;
  xs.resize(static_cast<size_t>(V));
  p.resize(static_cast<size_t>(V));
  float m = kNegInf;
  for (int64_t i = 0; i < V; ++i) m = std::max(m, xs[i] = x[i] / temperature);
  cand.clear();
  for (int64_t i = 0; i < V; ++i) {
    p[i] = xs[i] == m ? 1.0f : static_cast<float>(std::exp(double{xs[i] - m}));
    if (p[i] >= min_p) cand.push_back(static_cast<int32_t>(i));
  }
  // min_p keeps an upper set of x, so the k-th largest x among its tokens is the row's
  // whenever it holds k or more; when it holds fewer, top_k removes none of them.
  float kth = kNegInf;
  const bool use_k = top_k > 0 && static_cast<size_t>(top_k) < cand.size();
  if (use_k) {
    thread_local std::vector<float> values;  // a contiguous copy selects faster than ids
    values.clear();
    for (int32_t i : cand) values.push_back(xs[i]);
    std::nth_element(values.begin(), values.begin() + (top_k - 1), values.end(), std::greater<float>());
    kth = values[top_k - 1];
    std::erase_if(cand, [&](int32_t i) { return !(xs[i] >= kth); });
  }
  const auto kept_by_k = [&](int64_t i) { return p[i] >= min_p && (!use_k || xs[i] >= kth); };
  float p_star = 0;
  if (top_p < 1.0f) {
    double total = 0;
    for (int64_t i = 0; i < V; ++i)
      if (kept_by_k(i)) total += p[i];
    p_star = TopPThreshold(cand, p.data(), double{top_p} * total);
  }
  const auto kept = [&](int64_t i) { return kept_by_k(i) && p[i] >= p_star; };
  double mass = 0;
  for (int64_t i = 0; i < V; ++i)
    if (kept(i)) mass += p[i];
  const double target = SampleUniform(bits) * mass;
  double cum = 0;
  int32_t last = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (!kept(i)) continue;
    cum += p[i];
    last = static_cast<int32_t>(i);
    if (cum > target) return last;
  }
  return last;
}

void SampleTokensCpu(const Queue& q, const Tensor& out_ids, const Tensor& logits, const Tensor& params,
                     const Tensor& top_k, const Tensor& random_bits) {
  constexpr std::string_view op = "SampleTokens";
  const int64_t R = logits.dim(0), V = logits.dim(1);
  const float* prm = params.data_as<float>();
  for (int64_t r = 0; r < R; ++r) {
    const float t = prm[3 * r], tp = prm[3 * r + 1], mp = prm[3 * r + 2];
    VT_CHECK(std::isfinite(t) && t >= 0, op, ": params[", r, ", 0] (temperature) = ", t, " must be finite and >= 0");
    VT_CHECK(tp > 0 && tp <= 1, op, ": params[", r, ", 1] (top_p) = ", tp, " must be in (0, 1]");
    VT_CHECK(mp >= 0 && mp <= 1, op, ": params[", r, ", 2] (min_p) = ", mp, " must be in [0, 1]");
  }
  ForRows(q, R, [&](int64_t r) {
    out_ids.data_as<int32_t>()[r] =
        SampleRowFast(logits.data_as<float>() + r * V, V, prm[3 * r], prm[3 * r + 1], prm[3 * r + 2],
                      top_k.data_as<int32_t>()[r], static_cast<uint64_t>(random_bits.data_as<int64_t>()[r]));
  });
}

}  // namespace

void RegisterSamplingKernels() {
  Register<OpId::kTopKLogprobs>(DeviceType::kCPU, &TopKLogprobsCpu);
  Register<OpId::kLogitsMask>(DeviceType::kCPU, &LogitsMaskCpu);
  Register<OpId::kLogitsAddSparse>(DeviceType::kCPU, &LogitsAddSparseCpu);
  Register<OpId::kLogitsPenalties>(DeviceType::kCPU, &LogitsPenaltiesCpu);
  Register<OpId::kSampleTokens>(DeviceType::kCPU, &SampleTokensCpu);
}

}  // namespace vt::cpu
