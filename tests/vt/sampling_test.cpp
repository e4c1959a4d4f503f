// Sampling ops on the CPU: each op against the definition-level references of
// sampling_test_ref.h and against the backend's scalar references (cpu::ref), seeded draws
// reproducible and independent of the batch, the draw distribution, and bad input refused.
#include "vt/ops/sampling.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "vt/cpu/sampling_reference.h"
#include "vt/sampling_test_ref.h"
#include "vt/vt.h"

namespace vt {
namespace {

using sampling_ref::kInf;
using sampling_ref::Params;

void ExpectError(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no vt::Error (expected one mentioning " << parts.front() << ")";
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

Tensor F32(const std::vector<float>& v, const Shape& s) { return Tensor::FromHost(v.data(), s, DType::kF32); }
Tensor I32(const std::vector<int32_t>& v) {
  return Tensor::FromHost(v.data(), {static_cast<int64_t>(v.size())}, DType::kI32);
}
template <typename T>
std::vector<T> Host(const Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  if (!v.empty()) t.CopyToHost(v.data());
  return v;
}

// Runs SampleTokens on rows of `logits` (each V long) with per-row params.
std::vector<int32_t> SampleOp(const Queue& q, const std::vector<std::vector<float>>& rows,
                              const std::vector<Params>& ps) {
  const int64_t R = static_cast<int64_t>(rows.size()), V = static_cast<int64_t>(rows[0].size());
  std::vector<float> flat, prm;
  std::vector<int32_t> k;
  std::vector<int64_t> bits;
  for (int64_t r = 0; r < R; ++r) {
    flat.insert(flat.end(), rows[r].begin(), rows[r].end());
    prm.insert(prm.end(), {ps[r].temperature, ps[r].top_p, ps[r].min_p});
    k.push_back(ps[r].top_k);
    bits.push_back(static_cast<int64_t>(ps[r].bits));
  }
  Tensor out = Tensor::Empty({R}, DType::kI32);
  SampleTokens(q, out, F32(flat, {R, V}), F32(prm, {R, 3}), I32(k), Tensor::FromHost(bits.data(), {R}, DType::kI64));
  return Host<int32_t>(out);
}

int32_t SampleOne(const Queue& q, const std::vector<float>& x, const Params& p) { return SampleOp(q, {x}, {p})[0]; }

TEST(SamplingOps, DrawBitsArePureAndDistinct) {
  static_assert(SampleBits(7, 3) == SampleBits(7, 3));
  EXPECT_NE(SampleBits(7, 3), SampleBits(7, 4));
  EXPECT_NE(SampleBits(7, 3), SampleBits(8, 3));
  EXPECT_GE(SampleUniform(~0ull), 0.0);
  EXPECT_LT(SampleUniform(~0ull), 1.0);
  EXPECT_EQ(SampleUniform(0), 0.0);
}

TEST(SamplingOps, TopKLogprobsMatchesLogSoftmax) {
  Queue q = Queue::Cpu(2);
  const int64_t V = 300;
  std::vector<std::vector<float>> rows = {sampling_ref::RandomLogits(V, 1), sampling_ref::RandomLogits(V, 2, 3, true),
                                          std::vector<float>(V, -kInf), std::vector<float>(V, 0.5f)};
  for (int64_t i = 0; i < V; i += 3) rows[1][i] = -kInf;  // masked tokens
  rows[2][17] = 4.0f;                                     // one finite token
  std::vector<float> flat;
  for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  const std::vector<int32_t> targets = {5, 7, 17, 299};
  const int64_t R = 4;
  for (int64_t K : {int64_t{0}, int64_t{1}, int64_t{20}, V}) {
    Tensor ids = Tensor::Empty({R, K}, DType::kI32), lps = Tensor::Empty({R, K}, DType::kF32);
    Tensor tl = Tensor::Empty({R}, DType::kF32), tr = Tensor::Empty({R}, DType::kI32);
    TopKLogprobs(q, F32(flat, {R, V}), I32(targets), ids, lps, tl, tr);
    const auto hid = Host<int32_t>(ids), hr = Host<int32_t>(tr);
    const auto hlp = Host<float>(lps), htl = Host<float>(tl);
    for (int64_t r = 0; r < R; ++r) {
      const auto lp = sampling_ref::LogSoftmax(rows[r]);
      const auto top = sampling_ref::TopIds(rows[r], K);
      EXPECT_EQ(hr[r], sampling_ref::Rank(rows[r], targets[r])) << "row " << r;
      if (std::isinf(lp[targets[r]])) {
        EXPECT_EQ(htl[r], -kInf) << "row " << r;
      } else {
        EXPECT_NEAR(htl[r], lp[targets[r]], 1e-5) << "row " << r;
      }
      for (int64_t j = 0; j < K; ++j) {
        EXPECT_EQ(hid[r * K + j], top[j]) << "row " << r << " top " << j;
        if (!std::isinf(lp[top[j]])) {
          EXPECT_NEAR(hlp[r * K + j], lp[top[j]], 1e-5) << "row " << r << " top " << j;
        }
      }
      // The scalar reference agrees bit for bit.
      std::vector<int32_t> rid(K);
      std::vector<float> rlp(K);
      float rt;
      int32_t rrank;
      cpu::ref::TopKLogprobsRow(rows[r].data(), V, targets[r], K, rid.data(), rlp.data(), &rt, &rrank);
      EXPECT_EQ(rrank, hr[r]);
      EXPECT_EQ(std::memcmp(&rt, &htl[r], 4), 0) << "row " << r;
      for (int64_t j = 0; j < K; ++j) EXPECT_EQ(rid[j], hid[r * K + j]);
    }
  }
  // Row 2: the one finite token is certain; row 3: all tied, rank 1, uniform, lower ids first.
  Tensor ids = Tensor::Empty({R, 3}, DType::kI32), lps = Tensor::Empty({R, 3}, DType::kF32);
  Tensor tl = Tensor::Empty({R}, DType::kF32), tr = Tensor::Empty({R}, DType::kI32);
  TopKLogprobs(q, F32(flat, {R, V}), I32(targets), ids, lps, tl, tr);
  EXPECT_EQ(Host<float>(tl)[2], 0.0f);
  EXPECT_EQ(Host<int32_t>(tr)[3], 1);
  EXPECT_NEAR(Host<float>(tl)[3], -std::log(300.0), 1e-6);
  EXPECT_EQ(Host<int32_t>(ids)[9], 0);
  EXPECT_EQ(Host<int32_t>(ids)[11], 2);
}

TEST(SamplingOps, MaskAllowedAndBanned) {
  Queue q = Queue::Cpu(2);
  const int64_t V = 50, R = 4;
  std::vector<float> flat;
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < R; ++r)
    rows.push_back(sampling_ref::RandomLogits(V, 10 + r)), flat.insert(flat.end(), rows[r].begin(), rows[r].end());
  // Row 0: one allowed token; row 1: all but token 9 banned (with repeats); row 2: allowed
  // {3, 8, 40} with 8 also banned; row 3: untouched.
  std::vector<int32_t> a_off = {0, 1, 1, 4, 4}, allowed = {33, 3, 8, 40};
  std::vector<int32_t> b_off = {0, 0, 0, 0, 0}, banned;
  for (int32_t t = 0; t < V; ++t)
    if (t != 9) banned.push_back(t);
  banned.push_back(0);
  b_off = {0, 0, static_cast<int32_t>(banned.size()), static_cast<int32_t>(banned.size()) + 1,
           static_cast<int32_t>(banned.size()) + 1};
  banned.push_back(8);
  Tensor logits = F32(flat, {R, V});
  LogitsMask(q, logits, I32(a_off), I32(allowed), I32(b_off), I32(banned));
  const auto got = Host<float>(logits);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < V; ++i) {
      bool masked = false;
      if (r == 0) masked = i != 33;
      if (r == 1) masked = i != 9;
      if (r == 2) masked = !(i == 3 || i == 40);
      EXPECT_EQ(got[r * V + i], masked ? -kInf : rows[r][i]) << r << "," << i;
    }
  // Sampling after the mask can only give the survivor, greedy or not.
  std::vector<std::vector<float>> masked_rows = {{got.begin(), got.begin() + V},
                                                 {got.begin() + V, got.begin() + 2 * V}};
  for (uint64_t s = 0; s < 20; ++s) {
    const auto ids = SampleOp(q, masked_rows, {Params{1.0f, 1.0f, 0.0f, 0, SampleBits(s, 0)}, Params{0.0f}});
    EXPECT_EQ(ids[0], 33);
    EXPECT_EQ(ids[1], 9);
  }
  // Empty lists change nothing; bad lists are refused naming the op and the entry.
  Tensor l2 = F32(flat, {R, V});
  LogitsMask(q, l2, I32({0, 0, 0, 0, 0}), I32({}), I32({0, 0, 0, 0, 0}), I32({}));
  EXPECT_EQ(Host<float>(l2), flat);
  ExpectError(
      [&] {
        LogitsMask(q, l2, I32({0, 2, 2, 2, 2}), I32({5, 4}), I32({0, 0, 0, 0, 0}), I32({}));
      },
      {"LogitsMask", "allowed_ids of row 0", "ascending"});
  ExpectError(
      [&] {
        LogitsMask(q, l2, I32({0, 0, 0, 0, 0}), I32({}), I32({0, 1, 1, 1, 1}), I32({50}));
      },
      {"LogitsMask", "banned_ids[0] = 50", "vocabulary"});
  ExpectError(
      [&] {
        LogitsMask(q, l2, I32({0, 0, 0, 0, 3}), I32({1}), I32({0, 0, 0, 0, 0}), I32({}));
      },
      {"LogitsMask", "allowed_offsets[4] = 3"});
  ExpectError(
      [&] {
        LogitsMask(q, l2, I32({0, 0, 0}), I32({}), I32({0, 0, 0, 0, 0}), I32({}));
      },
      {"LogitsMask", "allowed_offsets", "[5]"});
}

TEST(SamplingOps, AddSparseAndPenaltiesFollowTheDefinition) {
  Queue q = Queue::Cpu(2);
  const int64_t V = 40, R = 3;
  std::vector<std::vector<float>> rows;
  std::vector<float> flat;
  for (int r = 0; r < R; ++r) {
    rows.push_back(sampling_ref::RandomLogits(V, 20 + r));
    rows[r][0] = 0.0f;  // neither > 0 nor < 0
    rows[r][1] = -kInf;
    flat.insert(flat.end(), rows[r].begin(), rows[r].end());
  }
  // logit_bias: row 0 two pairs, row 2 one.
  Tensor logits = F32(flat, {R, V});
  LogitsAddSparse(q, logits, I32({0, 2, 2, 3}), I32({4, 7, 39}), F32({1.5f, -100.0f, 0.25f}, {3}));
  auto want = rows;
  want[0][4] += 1.5f, want[0][7] += -100.0f, want[2][39] += 0.25f;
  auto got = Host<float>(logits);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < V; ++i) EXPECT_EQ(got[r * V + i], want[r][i]) << r << "," << i;
  // Penalties: per row a prompt and an output, listed as the definition asks.
  const std::vector<std::vector<int32_t>> prompt = {{0, 1, 2, 3, 3}, {5, 6}, {}};
  const std::vector<std::vector<int32_t>> output = {{3, 3, 9, 10}, {6, 6, 6, 11}, {12}};
  const std::vector<std::array<float, 3>> pen = {{{1.3f, 0.5f, 0.25f}}, {{0.7f, -0.2f, 1.0f}}, {{1.0f, 0.0f, 0.5f}}};
  std::vector<int32_t> off = {0}, ids, counts;
  std::vector<float> pflat;
  for (int64_t r = 0; r < R; ++r) {
    std::vector<int> c(V, 0);
    std::vector<char> seen(V, 0);
    for (int32_t t : prompt[r]) seen[t] = 1;
    for (int32_t t : output[r]) seen[t] = 1, ++c[t];
    for (int32_t t = 0; t < V; ++t)
      if (seen[t]) ids.push_back(t), counts.push_back(c[t]);
    off.push_back(static_cast<int32_t>(ids.size()));
    pflat.insert(pflat.end(), pen[r].begin(), pen[r].end());
    sampling_ref::Penalize(want[r], c, seen, pen[r][0], pen[r][1], pen[r][2]);
  }
  LogitsPenalties(q, logits, I32(off), I32(ids), I32(counts), F32(pflat, {R, 3}));
  got = Host<float>(logits);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < V; ++i) EXPECT_EQ(got[r * V + i], want[r][i]) << r << "," << i;
  EXPECT_EQ(got[0], 0.0f);   // 0 is neither divided nor multiplied
  EXPECT_EQ(got[1], -kInf);  // masked stays masked
  ExpectError(
      [&] {
        LogitsPenalties(q, logits, I32({0, 0, 0, 0}), I32({}), I32({}), F32({0, 0, 0, 1, 0, 0, 1, 0, 0}, {R, 3}));
      },
      {"LogitsPenalties", "penalties[0, 0]", "repetition"});
  ExpectError(
      [&] {
        LogitsPenalties(q, logits, I32({0, 1, 1, 1}), I32({3}), I32({-1}), F32(pflat, {R, 3}));
      },
      {"LogitsPenalties", "counts[0] = -1"});
}

TEST(SamplingOps, GreedyTakesTheLowestIdOfTheMax) {
  Queue q = Queue::Cpu(1);
  std::vector<float> x = {0.5f, 2.0f, -1.0f, 2.0f, 2.0f};
  for (float t : {0.0f, 1e-6f, 9.99e-6f}) EXPECT_EQ(SampleOne(q, x, {t, 0.3f, 0.5f, 2, 123}), 1) << t;
  EXPECT_EQ(SampleOne(q, std::vector<float>(7, -kInf), {0.0f}), 0);
  // At or above the greedy bound, a tiny temperature still samples (here among the ties).
  std::set<int32_t> seen;
  for (uint64_t s = 0; s < 64; ++s) seen.insert(SampleOne(q, x, {1e-5f, 1.0f, 0.0f, 0, SampleBits(s, 0)}));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3, 4}));
}

// Every filter configuration: the op, the scalar reference and the definition-level
// reference give the same token for many draws.
TEST(SamplingOps, FiltersAndDrawMatchTheDefinition) {
  Queue q = Queue::Cpu(2);
  const int64_t V = 64;
  const std::vector<Params> configs = {{1.0f, 1.0f, 0.0f, 0},    {0.7f, 0.9f, 0.0f, 0},  {1.3f, 0.5f, 0.05f, 10},
                                       {1.0f, 1.0f, 0.0f, 1000}, {0.5f, 1.0f, 1.0f, 0},  {1.0f, 0.3f, 0.0f, 5},
                                       {2.0f, 1.0f, 0.2f, 0},    {1e-4f, 1.0f, 0.0f, 0}, {1.0f, 1e-6f, 0.0f, 0},
                                       {1.0f, 0.8f, 0.0f, 64},   {1.0f, 0.95f, 0.0f, 3}, {0.9f, 0.6f, 0.1f, 20}};
  for (int ties = 0; ties < 2; ++ties) {
    const auto x = sampling_ref::RandomLogits(V, 100 + ties, 1.5f, ties == 1);
    for (size_t c = 0; c < configs.size(); ++c) {
      std::vector<std::vector<float>> rows;
      std::vector<Params> ps;
      for (uint64_t d = 0; d < 50; ++d) {
        Params p = configs[c];
        p.bits = SampleBits(1000 + c, d);
        rows.push_back(x), ps.push_back(p);
      }
      const auto ids = SampleOp(q, rows, ps);
      for (size_t d = 0; d < ids.size(); ++d) {
        const Params& p = ps[d];
        ASSERT_EQ(ids[d], sampling_ref::Sample(x, p)) << "ties " << ties << " config " << c << " draw " << d;
        ASSERT_EQ(ids[d], cpu::ref::SampleRow(x.data(), V, p.temperature, p.top_p, p.min_p, p.top_k, p.bits));
      }
    }
  }
  // min_p = 1 keeps exactly the tied maxima; top_k = 1 the max; a single finite logit wins.
  const std::vector<float> x = {1.0f, 3.0f, 3.0f, -2.0f, 0.0f};
  std::set<int32_t> minp1, topk1;
  for (uint64_t s = 0; s < 64; ++s) {
    minp1.insert(SampleOne(q, x, {1.0f, 1.0f, 1.0f, 0, SampleBits(s, 1)}));
    topk1.insert(SampleOne(q, x, {1.0f, 1.0f, 0.0f, 1, SampleBits(s, 2)}));
    EXPECT_EQ(SampleOne(q, {-kInf, -kInf, 0.5f, -kInf}, {1.0f, 1.0f, 0.0f, 0, SampleBits(s, 3)}), 2);
  }
  EXPECT_EQ(minp1, (std::set<int32_t>{1, 2}));
  EXPECT_EQ(topk1, (std::set<int32_t>{1, 2}));  // the tie at the k-th value is kept
}

// A large vocabulary exercises the fast kernel's partial selections (top_p prefixes that
// must grow, top_k far below V); it must agree with the full-sort scalar reference.
TEST(SamplingOps, LargeVocabularyFastPathMatchesScalarReference) {
  Queue q = Queue::Cpu(2);
  const int64_t V = 152064;
  const std::vector<Params> configs = {{1.0f, 0.999f, 0.0f, 0}, {0.8f, 0.9f, 0.0f, 0},   {1.0f, 0.7f, 0.0f, 50},
                                       {1.0f, 1.0f, 0.0f, 40},  {1.2f, 0.95f, 0.01f, 0}, {0.0f}};
  std::vector<std::vector<float>> rows;
  std::vector<Params> ps;
  for (size_t c = 0; c < configs.size(); ++c) {
    rows.push_back(sampling_ref::RandomLogits(V, 500 + c, c == 0 ? 0.3f : 3.0f, c == 1));
    ps.push_back(configs[c]);
    ps.back().bits = SampleBits(77, c);
  }
  const auto ids = SampleOp(q, rows, ps);
  for (size_t c = 0; c < configs.size(); ++c) {
    const Params& p = ps[c];
    EXPECT_EQ(ids[c], cpu::ref::SampleRow(rows[c].data(), V, p.temperature, p.top_p, p.min_p, p.top_k, p.bits))
        << "config " << c;
  }
}

TEST(SamplingOps, SeededDrawsAreReproducibleAndIndependentOfTheBatch) {
  const int64_t V = 1000;
  const auto target = sampling_ref::RandomLogits(V, 7);
  const Params p{0.8f, 0.9f, 0.0f, 50, SampleBits(42, 5)};
  const int32_t alone = SampleOne(Queue::Cpu(1), target, p);
  EXPECT_EQ(SampleOne(Queue::Cpu(1), target, p), alone);
  for (int threads : {1, 2}) {
    std::vector<std::vector<float>> rows;
    std::vector<Params> ps;
    for (int r = 0; r < 9; ++r) {
      rows.push_back(sampling_ref::RandomLogits(V, 900 + r, 4.0f));
      ps.push_back({0.5f + 0.1f * r, 1.0f - 0.05f * r, 0.0f, r * 7, SampleBits(r, r)});
    }
    rows[5] = target, ps[5] = p;
    EXPECT_EQ(SampleOp(Queue::Cpu(threads), rows, ps)[5], alone) << threads << " threads";
  }
}

// Many draws (different draw_index) follow softmax(logits / T) restricted to the kept set:
// a chi-square bound that a wrong temperature or a wrong top_p exceeds many times over.
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0) {
      if (counts[i] > 0) return 1e30;  // a dropped token was drawn
      continue;
    }
    const double e = probs[i] * n;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

TEST(SamplingOps, DrawDistributionMatchesSoftmax) {
  Queue q = Queue::Cpu(2);
  const std::vector<float> x = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f, -1.0f, 0.7f};
  const int n = 20000;
  struct Case {
    float t, top_p;
  };
  for (const Case c : {Case{0.7f, 1.0f}, Case{1.5f, 1.0f}, Case{1.0f, 0.75f}}) {
    std::vector<std::vector<float>> rows(n, x);
    std::vector<Params> ps(n);
    for (int d = 0; d < n; ++d) ps[d] = {c.t, c.top_p, 0.0f, 0, SampleBits(2024, d)};
    const auto ids = SampleOp(q, rows, ps);
    std::vector<int> counts(x.size(), 0);
    for (int32_t id : ids) ++counts[id];
    // Expected: exp(x/T) over the tokens that top_p keeps (the smallest most likely set
    // holding top_p of the mass), normalised; and what a wrong T or top_p would predict.
    auto expected = [&](float t, float top_p) {
      std::vector<double> e(x.size());
      double s = 0;
      for (size_t i = 0; i < x.size(); ++i) s += e[i] = std::exp(double{x[i]} / t);
      std::vector<size_t> order(x.size());
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] > x[b]; });
      double cum = 0, kept = 0;
      std::vector<double> out(x.size(), 0.0);
      for (size_t i : order) {
        if (cum >= top_p * s) break;
        cum += e[i], kept += e[i], out[i] = e[i];
      }
      for (double& v : out) v /= kept;
      return out;
    };
    const double df = 7, bound = df + 6 * std::sqrt(2 * df);  // ~6 sigma
    EXPECT_LT(ChiSquare(counts, expected(c.t, c.top_p), n), bound) << "T " << c.t << " top_p " << c.top_p;
    EXPECT_GT(ChiSquare(counts, expected(c.t * 1.25f, c.top_p), n), bound) << "a wrong temperature passes";
    if (c.top_p < 1) {
      EXPECT_GT(ChiSquare(counts, expected(c.t, 1.0f), n), bound) << "a wrong top_p passes";
    }
  }
}

TEST(SamplingOps, BadInputIsRefusedByName) {
  Queue q = Queue::Cpu(1);
  const std::vector<float> x(10, 0.0f);
  ExpectError([&] { SampleOne(q, x, {1.0f, 0.0f}); }, {"SampleTokens", "top_p", "(0, 1]"});
  ExpectError([&] { SampleOne(q, x, {1.0f, 1.0f, 1.5f}); }, {"SampleTokens", "min_p"});
  ExpectError([&] { SampleOne(q, x, {NAN}); }, {"SampleTokens", "temperature"});
  Tensor out = Tensor::Empty({1}, DType::kI32);
  ExpectError(
      [&] {
        SampleTokens(q, out, Tensor::Empty({1, 10}, DType::kBF16), F32({1, 1, 0}, {1, 3}), I32({0}),
                     Tensor::Empty({1}, DType::kI64));
      },
      {"SampleTokens", "logits", "F32"});
  ExpectError(
      [&] {
        SampleTokens(q, out, F32(x, {1, 10}), F32({1, 1, 0}, {1, 3}), I32({0, 0}), Tensor::Empty({1}, DType::kI64));
      },
      {"SampleTokens", "top_k", "[1]"});
  Tensor ids = Tensor::Empty({1, 11}, DType::kI32), lps = Tensor::Empty({1, 11}, DType::kF32);
  ExpectError(
      [&] {
        TopKLogprobs(q, F32(x, {1, 10}), I32({0}), ids, lps, Tensor::Empty({1}, DType::kF32),
                     Tensor::Empty({1}, DType::kI32));
      },
      {"TopKLogprobs", "11 tokens", "10-token"});
  Tensor ids2 = Tensor::Empty({1, 1}, DType::kI32), lps2 = Tensor::Empty({1, 1}, DType::kF32);
  ExpectError(
      [&] {
        TopKLogprobs(q, F32(x, {1, 10}), I32({10}), ids2, lps2, Tensor::Empty({1}, DType::kF32),
                     Tensor::Empty({1}, DType::kI32));
      },
      {"TopKLogprobs", "targets[0] = 10"});
}

}  // namespace
}  // namespace vt
