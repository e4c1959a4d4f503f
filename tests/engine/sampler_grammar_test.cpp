// The sampler's structured-output mask (SamplingRow::grammar_bitmask): a row under a bitmask
// draws what the same row draws with the bitmask's tokens as allowed_token_ids (a path the
// reference chain pins), whether the mask is sparse (sent as allowed ids) or dense (sent as
// banned ids), and intersected with the row's own allowed_token_ids.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "engine/sampler.h"
#include "vt/vt.h"

namespace vtllm::engine {
namespace {

std::vector<int32_t> Sample(Sampler& s, const std::vector<float>& logits, int64_t V, const SamplingRow& row) {
  std::vector<float> copy = logits;
  vt::Tensor t = vt::Tensor::FromHost(copy.data(), {1, V}, vt::DType::kF32);
  const std::vector<SamplingRow> rows = {row};
  return {s.Sample(t, rows)[0].token_id};
}

TEST(SamplerGrammar, BitmaskDrawsAsTheSameAllowedIds) {
  const int64_t V = 333;
  vt::Queue q = vt::Queue::Cpu(2);
  Sampler s(q, V, 4);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<float> logits(static_cast<size_t>(V));
    for (float& x : logits) x = normal(rng);
    // Sparse, dense and nearly full masks.
    const double keep = trial % 3 == 0 ? 0.02 : trial % 3 == 1 ? 0.6 : 0.97;
    std::vector<uint32_t> mask(static_cast<size_t>((V + 31) / 32), 0);
    std::vector<int32_t> ids;
    for (int32_t t = 0; t < V; ++t)
      if (std::uniform_real_distribution<double>(0, 1)(rng) < keep || t == trial) {
        mask[static_cast<size_t>(t / 32)] |= 1u << (t % 32);
        ids.push_back(t);
      }
    SamplingRow row;
    row.temperature = 1.0f;
    row.seed = static_cast<uint64_t>(trial);
    row.draw_index = 3;
    SamplingRow with_mask = row, with_ids = row;
    with_mask.grammar_bitmask = mask;
    with_ids.allowed_token_ids = ids;
    const int32_t got = Sample(s, logits, V, with_mask)[0];
    EXPECT_EQ(got, Sample(s, logits, V, with_ids)[0]) << "trial " << trial;
    EXPECT_TRUE((mask[static_cast<size_t>(got / 32)] >> (got % 32)) & 1u);

    // With the row's own allowed ids: both must pass (the intersection is drawn from).
    std::vector<int32_t> own, both;
    for (int32_t t = 0; t < V; t += 3) own.push_back(t);
    const std::set<int32_t> in_mask(ids.begin(), ids.end());
    for (int32_t t : own)
      if (in_mask.count(t)) both.push_back(t);
    if (both.empty()) continue;
    SamplingRow masked_own = with_mask, want = row;
    masked_own.allowed_token_ids = own;
    want.allowed_token_ids = both;
    EXPECT_EQ(Sample(s, logits, V, masked_own)[0], Sample(s, logits, V, want)[0]) << "trial " << trial;
  }
}

TEST(SamplerGrammar, AMaskOfTheWrongSizeIsRefused) {
  vt::Queue q = vt::Queue::Cpu(1);
  Sampler s(q, 64, 1);
  std::vector<float> logits(64, 0.0f);
  const std::vector<uint32_t> mask = {1u};  // 64 tokens need 2 words
  SamplingRow row;
  row.grammar_bitmask = mask;
  EXPECT_THROW(Sample(s, logits, 64, row), vt::Error);
}

}  // namespace
}  // namespace vtllm::engine
