// Async scheduling (EngineConfig::async_scheduling) on the tiny random Qwen3 (f32, CPU): the
// engine launches step n + 1 before it collects step n, its decode tokens taken from step n's
// draw on the device. Whatever runs (greedy and seeded draws, n > 1, stop tokens, min_tokens,
// max_tokens, logprobs, prompt logprobs, aborts, late arrivals, preemption, the prefix
// cache, stop strings), every request gets the tokens it gets with the engine waiting for
// each step; and the steps were launched ahead (counted), except while a request whose
// draw needs its last tokens on the host (penalties) is drawing.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "model/model_oracle.h"
#include "tokenizer/synthetic_tokenizer.h"

namespace vtllm::engine {
namespace {

using test_util::Greedy;
using test_util::Id;
using test_util::kTiny;
using test_util::TinyModel;


EngineConfig Config(bool async, int64_t kv_bytes = 0, int64_t max_model_len = 256) {
  EngineConfig c;
  c.model_dir = kTiny + "/bf16";
  c.max_model_len = max_model_len;
  c.max_num_seqs = 16;
  c.kv_cache_memory_bytes = kv_bytes;
  c.use_generation_config = false;
  c.load.progress = false;
  c.async_scheduling = async;
  return c;
}

// What a client sees of one completion.
struct Seen {
  std::vector<int32_t> tokens;
  std::vector<PositionLogprobs> logprobs;
  std::string text;
  std::optional<FinishReason> finish;
  std::optional<int32_t> stop_token;
};
using Transcript = std::map<std::string, Seen>;  // by "<request id>/<index>"

// Steps until every request finished; each_step(step) runs before step `step`.
Transcript RunToEnd(Engine& e, const std::function<void(int)>& each_step = nullptr) {
  Transcript t;
  for (int step = 0; e.HasUnfinished() && step < 5000; ++step) {
    if (each_step) each_step(step);
    for (RequestOutput& o : e.Step())
      for (CompletionDelta& d : o.completions) {
        Seen& s = t[o.request_id + "/" + std::to_string(d.index)];
        s.tokens.insert(s.tokens.end(), d.token_ids.begin(), d.token_ids.end());
        s.logprobs.insert(s.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
        s.text += d.text;
        if (d.finish_reason) s.finish = d.finish_reason, s.stop_token = d.stop_token_id;
      }
  }
  EXPECT_FALSE(e.HasUnfinished()) << "the engine does not finish";
  EXPECT_EQ(e.num_free_blocks(), e.num_total_blocks());
  return t;
}

void ExpectSame(const Transcript& sync, const Transcript& async) {
  ASSERT_EQ(sync.size(), async.size());
  for (const auto& [key, a] : sync) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(async.count(key));
    const Seen& b = async.at(key);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.text, b.text);
    EXPECT_EQ(a.finish, b.finish);
    EXPECT_EQ(a.stop_token, b.stop_token);
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    for (size_t i = 0; i < a.logprobs.size(); ++i) {
      EXPECT_EQ(a.logprobs[i].chosen.token_id, b.logprobs[i].chosen.token_id);
      EXPECT_NEAR(a.logprobs[i].chosen.logprob, b.logprobs[i].chosen.logprob, 1e-4);
      ASSERT_EQ(a.logprobs[i].top.size(), b.logprobs[i].top.size());
    }
  }
}

TEST(AsyncScheduling, OffByDefaultOnCpu) {
  EngineConfig c = Config(false);
  c.async_scheduling.reset();
  Engine e(c, TinyModel(), std::nullopt);
  EXPECT_EQ(e.config().async_scheduling, std::optional<bool>(false));
}

// The mixed workload: every request kind the engine draws for, requests arriving and
// aborted mid-run; once waiting for each step and once launching ahead.
TEST(AsyncScheduling, SameTokensAsWaitingForEachStep) {
  const auto cases = model::testing::ReadOracle(kTiny);
  ASSERT_EQ(cases.size(), 4u);
  // A stop token the greedy run of case 0 meets at its 6th token.
  int32_t stop_id = 0;
  {
    Engine e(Config(false), TinyModel(), std::nullopt);
    e.AddRequest(Greedy("probe", cases[0].prompt, 8));
    stop_id = RunToEnd(e)["probe/0"].tokens.at(5);
  }
  auto requests = [&] {
    std::vector<EngineRequest> rs;
    for (size_t c = 0; c < cases.size(); ++c) rs.push_back(Greedy(Id("g", c), cases[c].prompt, 12 + 5 * static_cast<int64_t>(c)));
    EngineRequest seeded = Greedy("seeded", cases[1].prompt, 16);
    seeded.params.temperature = 0.9, seeded.params.top_p = 0.9, seeded.params.seed = 7, seeded.params.logprobs = 2;
    rs.push_back(seeded);
    EngineRequest n2 = Greedy("n2", cases[2].prompt, 10);
    n2.params.n = 2, n2.params.temperature = 1.0, n2.params.seed = 3;
    rs.push_back(n2);
    EngineRequest stop = Greedy("stop", cases[0].prompt, 24);
    stop.params.stop_token_ids = {stop_id};
    rs.push_back(stop);
    EngineRequest held = stop;  // min_tokens masks the stop token for 9 tokens
    held.request_id = "held", held.params.min_tokens = 9;
    rs.push_back(held);
    EngineRequest plp = Greedy("plp", cases[3].prompt, 4);
    plp.params.prompt_logprobs = 2;
    rs.push_back(plp);
    EngineRequest score = Greedy("score", cases[2].prompt, 0);  // prompt logprobs only
    score.params.prompt_logprobs = 1;
    rs.push_back(score);
    return rs;
  };
  auto scenario = [&](bool async) {
    Engine e(Config(async), TinyModel(), std::nullopt);
    for (EngineRequest& r : requests()) e.AddRequest(std::move(r));
    Transcript t = RunToEnd(e, [&](int step) {
      if (step == 3) e.AddRequest(Greedy("late", cases[3].prompt, 9));
      if (step == 6) e.Abort("g3");
    });
    if (async) {
      EXPECT_GT(e.metrics().steps_launched_ahead, e.metrics().steps / 2);
    } else {
      EXPECT_EQ(e.metrics().steps_launched_ahead, 0u);
    }
    return t;
  };
  const Transcript sync = scenario(false), async = scenario(true);
  ExpectSame(sync, async);
  // The scenario did what it says.
  EXPECT_EQ(sync.at("stop/0").finish, std::optional(FinishReason::kStop));
  EXPECT_EQ(sync.at("stop/0").tokens.size(), 6u);
  EXPECT_GT(sync.at("held/0").tokens.size(), 9u);
  EXPECT_EQ(sync.at("g3/0").finish, std::optional(FinishReason::kAbort));
  EXPECT_EQ(sync.at("late/0").tokens.size(), 9u);
  EXPECT_EQ(sync.at("seeded/0").logprobs.size(), 16u);
  EXPECT_NE(sync.at("n2/0").tokens, sync.at("n2/1").tokens);
}

TEST(AsyncScheduling, PreemptionAndPrefixHitsGiveTheSameTokens) {
  const auto cases = model::testing::ReadOracle(kTiny);
  const int64_t per_block = TinyModel()->KvCacheBytesPerBlock(16);
  auto scenario = [&](bool async, uint64_t* preemptions, uint64_t* hits) {
    // Room for 6 blocks of 16 tokens: the four cases cannot run together.
    Engine e(Config(async, 6 * per_block, 96), TinyModel(), std::nullopt);
    for (size_t c = 0; c < cases.size(); ++c) e.AddRequest(Greedy(Id("r", c), cases[c].prompt, 24));
    Transcript t = RunToEnd(e);
    e.AddRequest(Greedy("again", cases[3].prompt, 8));  // its prefix blocks are cached
    Transcript again = RunToEnd(e);
    t.insert(again.begin(), again.end());
    *preemptions = e.metrics().num_preemptions;
    *hits = e.metrics().prefix_cache_hits;
    return t;
  };
  uint64_t p0 = 0, p1 = 0, h0 = 0, h1 = 0;
  const Transcript sync = scenario(false, &p0, &h0), async = scenario(true, &p1, &h1);
  ExpectSame(sync, async);
  EXPECT_GT(p1, 0u);
  EXPECT_GT(h1, 0u);
}

TEST(AsyncScheduling, PenaltiesWaitForTheirTokens) {
  const auto cases = model::testing::ReadOracle(kTiny);
  auto scenario = [&](bool async, uint64_t* ahead) {
    Engine e(Config(async), TinyModel(), std::nullopt);
    EngineRequest r = Greedy("pen", cases[1].prompt, 12);
    r.params.repetition_penalty = 1.5;
    r.params.presence_penalty = 0.5;
    e.AddRequest(r);
    Transcript t = RunToEnd(e);
    *ahead = e.metrics().steps_launched_ahead;
    return t;
  };
  uint64_t a0 = 0, a1 = 0;
  const Transcript sync = scenario(false, &a0), async = scenario(true, &a1);
  ExpectSame(sync, async);
  EXPECT_EQ(a1, 0u);
}

TEST(AsyncScheduling, StopStringsEndTheSameWay) {
  Tokenizer tok = Tokenizer::FromJson(test::SyntheticTokenizerJson().dump());
  auto letters = [](const std::string& id, int64_t max_tokens) {
    EngineRequest r = Greedy(id, {104, 101, 108, 108, 111, 32}, max_tokens);
    for (int32_t c = 'a'; c <= 'e'; ++c) r.params.allowed_token_ids.push_back(c);
    return r;
  };
  std::string full;
  {
    Engine e(Config(false), TinyModel(), tok);
    e.AddRequest(letters("full", 20));
    full = RunToEnd(e)["full/0"].text;
  }
  ASSERT_EQ(full.size(), 20u);
  auto scenario = [&](bool async) {
    Engine e(Config(async), TinyModel(), tok);
    EngineRequest a = letters("stop", 20), b = letters("other", 20);
    a.params.stop = {full.substr(7, 2)};
    e.AddRequest(a);
    e.AddRequest(b);
    return RunToEnd(e);
  };
  const Transcript sync = scenario(false), async = scenario(true);
  ExpectSame(sync, async);
  EXPECT_EQ(sync.at("stop/0").finish, std::optional(FinishReason::kStop));
  EXPECT_LT(sync.at("stop/0").text.size(), 20u);
}

}  // namespace
}  // namespace vtllm::engine
