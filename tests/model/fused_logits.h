// Logits of a prompt and greedy decode steps, and their bit-for-bit comparison: for tests
// that load one model twice, with a fused op and without (LoadOptions::fuse_quant), and
// require the same logits.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "model/model.h"
#include "model_oracle.h"

namespace vtllm::model::testing {

// The logits of every position of the prompt, then of `steps` - 1 greedy decode steps (the
// number of forwards is `steps`; the last step's token is not fed back).
inline std::vector<float> RunLogits(Model& model, const std::vector<int32_t>& prompt, int steps) {
  const int64_t V = model.vocab_size();
  KvCache cache = model.MakeKvCache(static_cast<int64_t>(prompt.size()) + steps + 1, 16);
  SequenceKv seq;
  std::vector<int64_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> all = model.Forward(prompt, pos, {&cache, &seq}, /*all_logits=*/true);
  for (int i = 1; i < steps; ++i) {
    const float* last = all.data() + all.size() - V;
    const int32_t tok = Argmax(last, V);
    const std::vector<float> next =
        model.Forward(std::vector<int32_t>{tok}, std::vector<int64_t>{seq.num_tokens}, {&cache, &seq});
    all.insert(all.end(), next.begin(), next.end());
  }
  return all;
}

// Every logit of `fused` has the bits of `unfused`'s, and the comparison is not vacuous: the
// logits are finite and not all equal.
inline void ExpectSameLogits(const std::vector<float>& fused, const std::vector<float>& unfused) {
  ASSERT_EQ(fused.size(), unfused.size());
  size_t first_diff = fused.size();
  for (size_t i = 0; i < fused.size() && first_diff == fused.size(); ++i)
    if (std::memcmp(&fused[i], &unfused[i], sizeof(float)) != 0) first_diff = i;
  EXPECT_EQ(first_diff, fused.size()) << "logit " << first_diff << ": fused " << fused[first_diff] << ", unfused "
                                      << unfused[first_diff];
  bool varied = false;
  for (float v : fused) {
    ASSERT_TRUE(std::isfinite(v));
    varied = varied || v != fused[0];
  }
  EXPECT_TRUE(varied) << "every logit equals " << (fused.empty() ? 0.0f : fused[0]);
}

}  // namespace vtllm::model::testing
