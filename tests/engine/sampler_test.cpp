// engine::Sampler on the CPU: the whole chain (logprobs snapshot, allowed, banned, bias,
// penalties, temperature and filters, draw) against a reference chain built from the
// definition-level references, each ordering rule pinned by a case that a reordering
// changes, prompt logprobs, seeded reproducibility across batches, and bad rows refused.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "vt/ops/sampling.h"
#include "vt/sampling_test_ref.h"
#include "vt/vt.h"

namespace vtllm::engine {
namespace {

using sampling_ref::kInf;

// A row's request state (SamplingRow holds spans into it).
struct RowData {
  SamplingRow row;
  std::vector<int32_t> prompt, output, allowed, banned;
  std::vector<std::pair<int32_t, float>> bias;
  SamplingRow Bind() const {
    SamplingRow r = row;
    r.prompt_tokens = prompt, r.output_tokens = output, r.allowed_token_ids = allowed, r.banned_token_ids = banned;
    r.logit_bias = bias;
    return r;
  }
};

// The reference chain for one row, in vLLM's order.
SampledToken ReferenceChain(std::vector<float> x, const RowData& d) {
  const std::vector<float> raw = x;
  const size_t V = x.size();
  if (!d.allowed.empty()) {
    const std::set<int32_t> ok(d.allowed.begin(), d.allowed.end());
    for (size_t i = 0; i < V; ++i)
      if (!ok.count(static_cast<int32_t>(i))) x[i] = -kInf;
  }
  for (int32_t t : d.banned) x[t] = -kInf;
  for (const auto& [t, b] : d.bias) x[t] += b;
  std::vector<int> counts(V, 0);
  std::vector<char> seen(V, 0);
  for (int32_t t : d.output) ++counts[t], seen[t] = 1;
  for (int32_t t : d.prompt) seen[t] = 1;
  sampling_ref::Penalize(x, counts, seen, d.row.repetition_penalty, d.row.frequency_penalty, d.row.presence_penalty);
  SampledToken out;
  out.token_id = sampling_ref::Sample(
      x, {d.row.temperature, d.row.top_p, d.row.min_p, d.row.top_k, vt::SampleBits(d.row.seed, d.row.draw_index)});
  if (d.row.num_logprobs >= 0) {
    const auto lp = sampling_ref::LogSoftmax(raw);
    PositionLogprobs p;
    p.chosen = {out.token_id, static_cast<float>(lp[out.token_id]), sampling_ref::Rank(raw, out.token_id)};
    const auto top = sampling_ref::TopIds(raw, d.row.num_logprobs);
    for (size_t j = 0; j < top.size(); ++j) p.top.push_back({top[j], static_cast<float>(lp[top[j]]), int64_t(j + 1)});
    out.logprobs = p;
  }
  return out;
}

std::vector<SampledToken> RunSampler(Sampler& s, const std::vector<std::vector<float>>& logits,
                                     const std::vector<RowData>& data) {
  const int64_t R = static_cast<int64_t>(logits.size()), V = static_cast<int64_t>(logits[0].size());
  std::vector<float> flat;
  for (const auto& r : logits) flat.insert(flat.end(), r.begin(), r.end());
  vt::Tensor t = vt::Tensor::FromHost(flat.data(), {R, V}, vt::DType::kF32);
  std::vector<SamplingRow> rows;
  for (const auto& d : data) rows.push_back(d.Bind());
  return s.Sample(t, rows);
}

void ExpectSameLogprobs(const PositionLogprobs& got, const PositionLogprobs& want, const std::string& where) {
  EXPECT_EQ(got.chosen.token_id, want.chosen.token_id) << where;
  EXPECT_EQ(got.chosen.rank, want.chosen.rank) << where;
  EXPECT_NEAR(got.chosen.logprob, want.chosen.logprob, 1e-5) << where;
  ASSERT_EQ(got.top.size(), want.top.size()) << where;
  for (size_t j = 0; j < got.top.size(); ++j) {
    EXPECT_EQ(got.top[j].token_id, want.top[j].token_id) << where << " top " << j;
    EXPECT_EQ(got.top[j].rank, want.top[j].rank) << where << " top " << j;
    EXPECT_NEAR(got.top[j].logprob, want.top[j].logprob, 1e-5) << where << " top " << j;
  }
}

// Rows exercising every step at once, with random logits.
std::vector<RowData> MixedRows(int64_t V, uint64_t step) {
  std::vector<RowData> d(7);
  d[0].row = {};             // plain sampling
  d[1].row.temperature = 0;  // greedy with bias and penalties
  d[1].bias = {{3, 2.5f}, {9, -1.0f}};
  d[1].row.repetition_penalty = 1.4f, d[1].prompt = {3, 4, 5}, d[1].output = {5, 5, 9};
  d[2].row.temperature = 0.7f, d[2].row.top_p = 0.8f, d[2].row.top_k = 12, d[2].row.num_logprobs = 5;
  d[2].row.frequency_penalty = 0.4f, d[2].row.presence_penalty = 0.3f, d[2].output = {1, 1, 1, 2, 7, 7};
  d[3].allowed = {40, 2, 17, 2, 99};  // unsorted, repeated
  d[3].row.num_logprobs = 0, d[3].row.temperature = 1.2f;
  d[4].banned = {0, 1, 2, 3, 4, 5, 6, 7};
  d[4].row.min_p = 0.1f, d[4].row.repetition_penalty = 0.8f, d[4].prompt = {10, 11, 12, 10};
  d[5].row.top_k = 1000, d[5].row.top_p = 1.0f, d[5].row.num_logprobs = 20;
  d[6].row.temperature = 0.5f, d[6].row.top_k = 3, d[6].bias = {{static_cast<int32_t>(V - 1), 100.0f}};
  for (size_t r = 0; r < d.size(); ++r) d[r].row.seed = 1000 + r, d[r].row.draw_index = step;
  return d;
}

TEST(Sampler, WholeChainMatchesTheReferenceInVllmOrder) {
  const int64_t V = 400;
  vt::Queue q = vt::Queue::Cpu(2);
  Sampler s(q, V, 16);
  for (uint64_t step = 0; step < 40; ++step) {
    const auto data = MixedRows(V, step);
    std::vector<std::vector<float>> logits;
    for (size_t r = 0; r < data.size(); ++r)
      logits.push_back(sampling_ref::RandomLogits(V, 50 * step + r, 2.0f, r == 5));
    const auto got = RunSampler(s, logits, data);
    ASSERT_EQ(got.size(), data.size());
    for (size_t r = 0; r < data.size(); ++r) {
      const SampledToken want = ReferenceChain(logits[r], data[r]);
      const std::string where = "step " + std::to_string(step) + " row " + std::to_string(r);
      ASSERT_EQ(got[r].token_id, want.token_id) << where;
      ASSERT_EQ(got[r].logprobs.has_value(), want.logprobs.has_value()) << where;
      if (want.logprobs) ExpectSameLogprobs(*got[r].logprobs, *want.logprobs, where);
    }
  }
}

// The sampled token's logprob and rank come from the raw logits: a bias that makes an
// unlikely token certain does not make it likely in the logprobs.
TEST(Sampler, LogprobsAreTheRawOnesBeforeAnyProcessing) {
  vt::Queue q = vt::Queue::Cpu(1);
  Sampler s(q, 4, 2);
  RowData d;
  d.row.num_logprobs = 2;
  d.bias = {{3, 50.0f}};
  d.row.repetition_penalty = 2.0f, d.prompt = {0};
  const std::vector<float> x = {2.0f, 1.0f, 0.5f, -3.0f};
  const auto got = RunSampler(s, {x}, {d});
  EXPECT_EQ(got[0].token_id, 3);
  ASSERT_TRUE(got[0].logprobs);
  EXPECT_EQ(got[0].logprobs->chosen.rank, 4);
  EXPECT_NEAR(got[0].logprobs->chosen.logprob, sampling_ref::LogSoftmax(x)[3], 1e-6);
  EXPECT_EQ(got[0].logprobs->top[0].token_id, 0);
}

// logit_bias comes before the repetition penalty: (1 + 1) / 4 = 0.5 < 0.6, where the
// other order gives 1 / 4 + 1 = 1.25 > 0.6.
TEST(Sampler, BiasIsAddedBeforeThePenalties) {
  vt::Queue q = vt::Queue::Cpu(1);
  Sampler s(q, 2, 1);
  RowData d;
  d.row.temperature = 0;
  d.bias = {{0, 1.0f}};
  d.row.repetition_penalty = 4.0f, d.prompt = {0};
  EXPECT_EQ(RunSampler(s, {{1.0f, 0.6f}}, {d})[0].token_id, 1);
}

// Penalties come before the temperature: [1, 0] with a frequency penalty of 1 on token 0
// is [0, 0] (both tokens pass min_p 0.9); dividing by T = 0.5 first would give [1, 0] and
// leave only token 0.
TEST(Sampler, PenaltiesComeBeforeTheTemperature) {
  vt::Queue q = vt::Queue::Cpu(1);
  Sampler s(q, 2, 1);
  std::set<int32_t> seen;
  for (uint64_t i = 0; i < 64; ++i) {
    RowData d;
    d.row.temperature = 0.5f, d.row.min_p = 0.9f, d.row.frequency_penalty = 1.0f, d.output = {0};
    d.row.seed = 5, d.row.draw_index = i;
    seen.insert(RunSampler(s, {{1.0f, 0.0f}}, {d})[0].token_id);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

// top_k comes before top_p: with k = 2 the two leaders hold 0.525 / 0.475 of the mass
// left, so top_p = 0.5 keeps only the first; top_p over the whole row first would keep
// both leaders (and more) and draw the second too.
TEST(Sampler, TopKComesBeforeTopP) {
  vt::Queue q = vt::Queue::Cpu(1);
  Sampler s(q, 6, 1);
  std::set<int32_t> seen;
  for (uint64_t i = 0; i < 64; ++i) {
    RowData d;
    d.row.top_k = 2, d.row.top_p = 0.5f, d.row.seed = 9, d.row.draw_index = i;
    seen.insert(RunSampler(s, {{3.0f, 2.9f, 2.8f, 2.7f, 2.6f, 2.5f}}, {d})[0].token_id);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{0}));
}

TEST(Sampler, SeededRowsGiveTheSameTokensAloneAndInAnyBatch) {
  const int64_t V = 2000;
  vt::Queue q = vt::Queue::Cpu(2);
  Sampler s(q, V, 8);
  const auto x = sampling_ref::RandomLogits(V, 3);
  RowData mine;
  mine.row.temperature = 0.9f, mine.row.top_p = 0.95f, mine.row.seed = 77;
  mine.output = {5, 6, 7};
  mine.row.presence_penalty = 0.5f;
  for (uint64_t step = 0; step < 10; ++step) {
    mine.row.draw_index = step;
    const int32_t alone = RunSampler(s, {x}, {mine})[0].token_id;
    EXPECT_EQ(RunSampler(s, {x}, {mine})[0].token_id, alone);
    auto batch = MixedRows(V, step + 100);
    std::vector<std::vector<float>> logits;
    for (size_t r = 0; r < batch.size(); ++r) logits.push_back(sampling_ref::RandomLogits(V, 700 + r));
    batch.insert(batch.begin() + 2, mine);
    logits.insert(logits.begin() + 2, x);
    EXPECT_EQ(RunSampler(s, logits, batch)[2].token_id, alone) << "step " << step;
  }
}

TEST(Sampler, PromptLogprobsMatchLogSoftmaxAndLeaveLogitsUnchanged) {
  const int64_t V = 300, R = 11;
  vt::Queue q = vt::Queue::Cpu(2);
  Sampler s(q, V, 4);  // fewer rows than positions: the sampler goes max_rows at a time
  std::vector<float> flat;
  std::vector<std::vector<float>> rows;
  std::vector<int32_t> targets;
  for (int64_t r = 0; r < R; ++r) {
    rows.push_back(sampling_ref::RandomLogits(V, 900 + r, 2.0f, r % 2 == 0));
    flat.insert(flat.end(), rows[r].begin(), rows[r].end());
    targets.push_back(static_cast<int32_t>((r * 37) % V));
  }
  vt::Tensor t = vt::Tensor::FromHost(flat.data(), {R, V}, vt::DType::kF32);
  const auto got = s.Logprobs(t, targets, 3);
  ASSERT_EQ(got.size(), static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    const auto lp = sampling_ref::LogSoftmax(rows[r]);
    PositionLogprobs want;
    want.chosen = {targets[r], static_cast<float>(lp[targets[r]]), sampling_ref::Rank(rows[r], targets[r])};
    const auto top = sampling_ref::TopIds(rows[r], 3);
    for (int j = 0; j < 3; ++j) want.top.push_back({top[j], static_cast<float>(lp[top[j]]), j + 1});
    ExpectSameLogprobs(got[r], want, "position " + std::to_string(r));
  }
  std::vector<float> after(flat.size());
  t.CopyToHost(after.data());
  EXPECT_EQ(after, flat);
}

TEST(Sampler, BadRowsAreRefusedNamingTheRowAndField) {
  vt::Queue q = vt::Queue::Cpu(1);
  Sampler s(q, 10, 2);
  auto expect_error = [&](RowData d, const std::string& part) {
    try {
      RunSampler(s, {std::vector<float>(10, 0.0f)}, {d});
      ADD_FAILURE() << "no error for " << part;
    } catch (const vt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  RowData d;
  d.row.top_p = 0;
  expect_error(d, "top_p");
  d = {}, d.output = {10};
  d.row.frequency_penalty = 1;
  expect_error(d, "output token id 10");
  d = {}, d.allowed = {-1};
  expect_error(d, "allowed token id -1");
  d = {}, d.row.num_logprobs = 21;
  expect_error(d, "21 logprobs");
  d = {}, d.row.repetition_penalty = 0;
  expect_error(d, "repetition_penalty");
  EXPECT_THROW(RunSampler(s, {std::vector<float>(10, 0.0f), std::vector<float>(10, 0.0f), std::vector<float>(10, 0.0f)},
                          {RowData{}, RowData{}, RowData{}}),
               vt::Error);
}

}  // namespace
}  // namespace vtllm::engine
