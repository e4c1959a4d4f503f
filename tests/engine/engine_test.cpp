// The engine end to end on a tiny random Qwen3 (tests/fixtures/oracles/qwen3-tiny) with f32
// activations: batching, chunked prefill, preemption and prefix caching must not change what
// each request generates, and the greedy tokens must be those of HF transformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <set>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "model/model_oracle.h"
#include "tokenizer/synthetic_tokenizer.h"
#include "vt/cpu/matmul/kernels.h"

// vt's dispatch record (vt/cpu/elementwise_kernels.h, which a test must not include: its inline
// functions depend on the library's own compile definitions).
namespace vt::cpu::elementwise {
const char* LastElementwiseSetOnThisThread();
}

namespace vtllm::engine {
namespace {

using test_util::Greedy;
using test_util::Id;
using test_util::kTiny;
using test_util::TinyModel;


EngineConfig Config(int64_t budget = 0, int64_t kv_bytes = 0, int64_t max_model_len = 256) {
  EngineConfig c;
  c.model_dir = kTiny + "/bf16";
  c.max_model_len = max_model_len;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = 16;
  c.kv_cache_memory_bytes = kv_bytes;
  c.use_generation_config = false;
  c.load.progress = false;
  return c;
}

struct Result {
  std::map<int, std::vector<int32_t>> tokens;  // by child index
  std::map<int, std::string> text;
  std::map<int, CompletionDelta> last;
  RequestOutput first;
  int64_t cached = 0;
  int outputs = 0;
};

// Steps until every request finished; gathers each request's outputs.
std::map<std::string, Result> RunAll(Engine& e, const std::function<void(int)>& each_step = nullptr) {
  std::map<std::string, Result> res;
  for (int step = 0; e.HasUnfinished(); ++step) {
    if (each_step) each_step(step);
    for (RequestOutput& o : e.Step()) {
      Result& r = res[o.request_id];
      if (r.outputs++ == 0) r.first = o;
      r.cached = o.num_cached_tokens;
      for (const CompletionDelta& d : o.completions) {
        r.tokens[d.index].insert(r.tokens[d.index].end(), d.token_ids.begin(), d.token_ids.end());
        r.text[d.index] += d.text;
        r.last[d.index] = d;
      }
    }
    EXPECT_LT(step, 10000) << "the engine does not finish";
    if (step >= 10000) break;
  }
  return res;
}

std::vector<model::testing::OracleCase> Cases() { return model::testing::ReadOracle(kTiny); }

// The elementwise kernel set each CPU level runs (as tests/vt/isa_dispatch_test.cpp).
const char* ElementwiseSetOf(vt::CpuIsa isa) {
  switch (isa) {
    case vt::CpuIsa::kScalar: return "scalar";
    case vt::CpuIsa::kAvx2: return "avx2";
    case vt::CpuIsa::kNeon:
    case vt::CpuIsa::kNeonBf16: return "neon";
    default: return "avx512";
  }
}

TEST(Engine, BatchedGreedyMatchesEachAloneAndTransformers) {
  const auto cases = Cases();
  ASSERT_EQ(cases.size(), 4u);
  std::map<std::string, std::vector<int32_t>> alone;
  for (size_t c = 0; c < cases.size(); ++c) {
    Engine e(Config(), TinyModel(), std::nullopt);
    e.AddRequest(Greedy(Id("r", c), cases[c].prompt, 24));
    alone[Id("r", c)] = RunAll(e)[Id("r", c)].tokens[0];
  }
  for (const int64_t budget : {int64_t{0}, int64_t{16}}) {  // default budget, then 16-token chunks
    Engine e(Config(budget), TinyModel(), std::nullopt);
    for (size_t c = 0; c < cases.size(); ++c) e.AddRequest(Greedy(Id("r", c), cases[c].prompt, 24));
    auto res = RunAll(e);
    for (size_t c = 0; c < cases.size(); ++c) {
      const std::string id = Id("r", c);
      EXPECT_EQ(res[id].tokens[0], alone[id]) << id << " budget " << budget;
      EXPECT_EQ(*res[id].last[0].finish_reason, FinishReason::kLength);
    }
    EXPECT_EQ(e.num_free_blocks(), e.num_total_blocks());
  }
  // Against HF transformers (f32 reference): every token up to the first near-tie.
  for (size_t c = 0; c < cases.size(); ++c) {
    const std::vector<int32_t>& got = alone[Id("r", c)];
    const size_t n = model::testing::StepsBeforeNearTie(cases[c].margins);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], cases[c].greedy[i]) << "case " << c << " step " << i;
  }
}

TEST(Engine, PreemptionRecomputesAndGivesTheSameTokens) {
  const auto cases = Cases();
  std::map<std::string, std::vector<int32_t>> want;
  {
    Engine e(Config(), TinyModel(), std::nullopt);
    for (size_t c = 0; c < cases.size(); ++c) e.AddRequest(Greedy(Id("r", c), cases[c].prompt, 24));
    for (auto& [id, r] : RunAll(e)) want[id] = r.tokens[0];
  }
  // Room for 6 blocks of 16 tokens: one 88-token sequence takes 6, so the four cannot run together.
  const int64_t per_block = TinyModel()->KvCacheBytesPerBlock(16);
  Engine e(Config(0, 6 * per_block, 96), TinyModel(), std::nullopt);
  EXPECT_EQ(e.num_total_blocks(), 6);
  for (size_t c = 0; c < cases.size(); ++c) e.AddRequest(Greedy(Id("r", c), cases[c].prompt, 24));
  auto res = RunAll(e);
  EXPECT_GT(e.metrics().num_preemptions, 0u);
  for (auto& [id, toks] : want) EXPECT_EQ(res[id].tokens[0], toks) << id;
  EXPECT_EQ(e.num_free_blocks(), e.num_total_blocks());
}

TEST(Engine, RepeatedPromptHitsThePrefixCache) {
  const auto cases = Cases();
  const std::vector<int32_t>& prompt = cases[3].prompt;  // 64 tokens: 4 full blocks
  Engine e(Config(), TinyModel(), std::nullopt);
  e.AddRequest(Greedy("first", prompt, 8));
  auto a = RunAll(e);
  const uint64_t hits_before = e.metrics().prefix_cache_hits;
  e.AddRequest(Greedy("again", prompt, 8));
  auto b = RunAll(e);
  EXPECT_EQ(a["first"].cached, 0);
  EXPECT_EQ(b["again"].cached, 48);  // 3 of 4 blocks: the last prompt token is computed
  EXPECT_EQ(e.metrics().prefix_cache_hits - hits_before, 48u);
  EXPECT_EQ(b["again"].tokens[0], a["first"].tokens[0]);
  // With prefix caching off, nothing hits.
  EngineConfig off = Config();
  off.enable_prefix_caching = false;
  Engine e2(off, TinyModel(), std::nullopt);
  e2.AddRequest(Greedy("first", prompt, 8));
  RunAll(e2);
  e2.AddRequest(Greedy("again", prompt, 8));
  EXPECT_EQ(RunAll(e2)["again"].cached, 0);
  EXPECT_EQ(e2.metrics().prefix_cache_hits, 0u);
}

// Which CPU kernels the engine's steps run: the model's queue takes the processor's highest
// level (under qemu, scripts/build_aarch64.sh names the level each CPU model must be detected
// as in VTLLM_EXPECT_CPU_ISA), and a step's elementwise ops (norms, activations, RoPE) record
// the vector set that level chose (vt's dispatch record), not the scalar reference.
TEST(Engine, StepsRunTheVectorKernelsOfTheDetectedLevel) {
  const vt::CpuIsa isa = TinyModel()->queue().cpu_isa();
  EXPECT_EQ(isa, vt::DetectCpuIsa()) << vt::CpuIsaName(isa);
  if (const char* want = std::getenv("VTLLM_EXPECT_CPU_ISA"); want != nullptr && *want != '\0') {
    EXPECT_STREQ(vt::CpuIsaName(isa), want);
  }
  Engine e(Config(), TinyModel(), std::nullopt);
  e.AddRequest(Greedy("r", Cases()[0].prompt, 2));
  RunAll(e);
  const char* set = vt::cpu::elementwise::LastElementwiseSetOnThisThread();
  ASSERT_NE(set, nullptr) << "no elementwise CPU op ran on the engine's thread";
  EXPECT_STREQ(set, ElementwiseSetOf(isa)) << "level " << vt::CpuIsaName(isa);
}

// The FP8 W8A8 checkpoint (qwen3-tiny fp8_modelopt) through the engine: its FP8 linears run
// the detected level's MatmulFp8 kernels, the prefill GEMM and the decode GEMV (the dispatch
// records of every GEMM the steps ran: the last one is the BF16 lm_head). On the ARM levels
// and scalar the set is named; the x86 levels choose among several (packed weights, BF16
// pairs), so there only "not the scalar one" is checked.
TEST(Engine, Fp8StepsRunTheMatmulKernelsOfTheDetectedLevel) {
  static const std::map<vt::CpuIsa, std::string> kFp8Set = {
      {vt::CpuIsa::kScalar, "scalar-f32"}, {vt::CpuIsa::kNeon, "neon-f32"}, {vt::CpuIsa::kNeonBf16, "neonbf16-bfmmla"}};
  std::shared_ptr<model::Model> m =
      model::Model::Load(kTiny + "/fp8_modelopt", model::testing::CpuOptions(vt::DType::kF32));
  const vt::CpuIsa isa = m->queue().cpu_isa();
  EXPECT_EQ(isa, vt::DetectCpuIsa()) << vt::CpuIsaName(isa);
  if (const char* want = std::getenv("VTLLM_EXPECT_CPU_ISA"); want != nullptr && *want != '\0') {
    EXPECT_STREQ(vt::CpuIsaName(isa), want);
  }
  EngineConfig c = Config();
  c.model_dir = kTiny + "/fp8_modelopt";
  Engine e(c, m, std::nullopt);
  ASSERT_GT(Cases()[3].prompt.size(), 4u);  // a prefill past the decode GEMV's rows
  e.AddRequest(Greedy("r", Cases()[3].prompt, 3));
  vt::cpu::matmul::ResetGemmsSeenOnThisThread();
  EXPECT_EQ(RunAll(e)["r"].tokens[0].size(), 3u);
  vt::cpu::matmul::GemmSeen seen[16];
  const int n = vt::cpu::matmul::GemmsSeenOnThisThread(seen, 16);
  std::set<std::pair<std::string, bool>> fp8;  // (set, streamed) of the GEMMs with fp8 weights
  for (int i = 0; i < std::min(n, 16); ++i) {
    ASSERT_NE(seen[i].set, nullptr);
    if (seen[i].b_dtype == vt::DType::kF8E4M3) fp8.insert({seen[i].set, seen[i].stream});
  }
  std::string all;
  for (const auto& [set, stream] : fp8) all += set + (stream ? std::string(" (stream) ") : std::string(" "));
  SCOPED_TRACE("level " + std::string(vt::CpuIsaName(isa)) + ", fp8 GEMMs seen: " + all);
  ASSERT_FALSE(fp8.empty());
  if (auto it = kFp8Set.find(isa); it != kFp8Set.end()) {
    for (const auto& [set, stream] : fp8) EXPECT_EQ(set, it->second);
    if (isa != vt::CpuIsa::kScalar) {  // the scalar set has no streaming path
      EXPECT_TRUE(fp8.count({it->second, true})) << "no decode GEMV";
      EXPECT_TRUE(fp8.count({it->second, false})) << "no prefill GEMM";
    }
  } else {
    for (const auto& [set, stream] : fp8) EXPECT_NE(set, "scalar-f32");
  }
  std::cout << "[ fp8 GEMMs of the steps ] " << vt::CpuIsaName(isa) << ": " << all << "\n";
}

TEST(Engine, SeededSamplingIsReproducibleAcrossRunsAndBatchMixes) {
  const auto cases = Cases();
  auto sampled = [&](const std::vector<size_t>& others, uint64_t seed) {
    Engine e(Config(), TinyModel(), std::nullopt);
    EngineRequest r = Greedy("seeded", cases[2].prompt, 16);
    r.params.temperature = 1.0;
    r.params.seed = seed;
    e.AddRequest(r);
    for (size_t o : others) {
      EngineRequest x = Greedy(Id("other", o), cases[o].prompt, 8);
      x.params.temperature = 0.7;
      e.AddRequest(x);
    }
    return RunAll(e)["seeded"].tokens[0];
  };
  const std::vector<int32_t> alone = sampled({}, 42);
  EXPECT_EQ(sampled({}, 42), alone);
  EXPECT_EQ(sampled({0, 1, 3}, 42), alone);
  EXPECT_NE(sampled({}, 43), alone);
  // n = 2 with a seed: child i draws with seed + i, as vLLM.
  Engine e(Config(), TinyModel(), std::nullopt);
  EngineRequest r = Greedy("pair", cases[2].prompt, 16);
  r.params.temperature = 1.0;
  r.params.seed = 42;
  r.params.n = 2;
  e.AddRequest(r);
  auto res = RunAll(e);
  EXPECT_EQ(res["pair"].tokens[0], alone);
  EXPECT_EQ(res["pair"].tokens[1], sampled({}, 43));
}

TEST(Engine, BadRequestsAreRefusedAndTheOthersGoOn) {
  Engine e(Config(0, 0, 64), TinyModel(), std::nullopt);
  e.AddRequest(Greedy("good", {1, 2, 3}, 4));
  auto expect_error = [&](EngineRequest r, const std::string& param, const std::string& text) {
    try {
      e.AddRequest(std::move(r));
      ADD_FAILURE() << "no error for " << param;
    } catch (const RequestError& err) {
      EXPECT_EQ(err.param(), param);
      EXPECT_NE(std::string(err.what()).find(text), std::string::npos) << err.what();
    }
  };
  expect_error(Greedy("long", std::vector<int32_t>(64, 1), 1), "messages", "maximum context length is 64 tokens");
  expect_error(Greedy("zero", {1}, 0), "max_tokens", "at least 1");
  expect_error(Greedy("vocab", {1, 512}, 1), "prompt", "outside the vocabulary");
  EngineRequest n = Greedy("n", {1}, 1);
  n.params.n = 0;
  expect_error(n, "n", "n must be");
  EngineRequest lp = Greedy("lp", {1}, 1);
  lp.params.logprobs = 21;
  expect_error(lp, "logprobs", "[0, 20]");
  EngineRequest t = Greedy("t", {1}, 1);
  t.params.top_p = 0;
  expect_error(t, "top_p", "(0, 1]");
  EngineRequest stop = Greedy("stop", {1}, 1);
  stop.params.stop = {"x"};
  expect_error(stop, "stop", "tokenizer");  // this engine has no tokenizer
  expect_error(Greedy("good", {1}, 1), "request_id", "already running");
  auto res = RunAll(e);
  EXPECT_EQ(res.size(), 1u);
  EXPECT_EQ(res["good"].tokens[0].size(), 4u);
  EXPECT_EQ(e.num_free_blocks(), e.num_total_blocks());
}

TEST(Engine, AbortFinishesAtOnceAndFreesBlocks) {
  Engine e(Config(), TinyModel(), std::nullopt);
  e.AddRequest(Greedy("a", {1, 2, 3, 4, 5}, 100));
  e.AddRequest(Greedy("b", {5, 6, 7}, 5));
  auto res = RunAll(e, [&](int step) {
    if (step == 3) e.Abort("a");
  });
  EXPECT_EQ(*res["a"].last[0].finish_reason, FinishReason::kAbort);
  EXPECT_LT(res["a"].tokens[0].size(), 10u);
  EXPECT_EQ(res["b"].tokens[0].size(), 5u);
  EXPECT_EQ(e.num_free_blocks(), e.num_total_blocks());
  EXPECT_EQ(e.metrics().request_success["abort"], 1u);
  e.Abort("no-such-request");  // ignored
}

TEST(Engine, MaxModelLenEndsARequestWithLength) {
  Engine e(Config(0, 0, 20), TinyModel(), std::nullopt);
  EngineRequest r = Greedy("r", std::vector<int32_t>(15, 3), 1);
  r.params.max_tokens.reset();  // what the context leaves: 5 tokens
  e.AddRequest(r);
  auto res = RunAll(e);
  EXPECT_EQ(res["r"].tokens[0].size(), 5u);
  EXPECT_EQ(*res["r"].last[0].finish_reason, FinishReason::kLength);
}

// Logprobs of the sampled token and the top ones, and prompt logprobs, against a log-softmax
// of the model's own logits.
TEST(Engine, LogprobsMatchTheLogSoftmaxOfTheLogits) {
  const std::vector<int32_t> prompt = {11, 200, 37, 5, 480};
  const std::vector<float> logits = model::testing::PromptLogits(*TinyModel(), prompt);
  const int64_t V = TinyModel()->vocab_size();
  auto logprob = [&](size_t row, int32_t tok) {
    const float* l = logits.data() + row * V;
    double mx = *std::max_element(l, l + V), s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(double(l[v]) - mx);
    return double(l[tok]) - mx - std::log(s);
  };
  Engine e(Config(), TinyModel(), std::nullopt);
  EngineRequest r = Greedy("lp", prompt, 1);
  r.params.logprobs = 3;
  r.params.prompt_logprobs = 2;
  e.AddRequest(r);
  auto res = RunAll(e);
  const CompletionDelta& d = res["lp"].last[0];
  ASSERT_EQ(d.logprobs.size(), 1u);
  const PositionLogprobs& p = d.logprobs[0];
  EXPECT_EQ(p.chosen.token_id, model::testing::Argmax(logits.data() + 4 * V, V));
  EXPECT_EQ(p.chosen.rank, 1);
  EXPECT_NEAR(p.chosen.logprob, logprob(4, p.chosen.token_id), 1e-4);
  ASSERT_EQ(p.top.size(), 3u);
  EXPECT_EQ(p.top[0].token_id, p.chosen.token_id);
  EXPECT_GE(p.top[1].logprob, p.top[2].logprob);
  ASSERT_TRUE(res["lp"].first.prompt_logprobs.has_value());
  const auto& plp = *res["lp"].first.prompt_logprobs;
  ASSERT_EQ(plp.size(), prompt.size() - 1);
  for (size_t i = 0; i < plp.size(); ++i) {
    EXPECT_EQ(plp[i].chosen.token_id, prompt[i + 1]);
    EXPECT_NEAR(plp[i].chosen.logprob, logprob(i, prompt[i + 1]), 1e-4) << i;
    EXPECT_EQ(plp[i].top.size(), 2u);
  }
}

// Text with the synthetic byte-level tokenizer (ids 0..255 are bytes): generation limited to
// the letters a-e, so the greedy text is plain ASCII.
class EngineText : public ::testing::Test {
 protected:
  Tokenizer tok = Tokenizer::FromJson(test::SyntheticTokenizerJson().dump());
  EngineRequest Letters(const std::string& id, int64_t max_tokens) {
    EngineRequest r = Greedy(id, {104, 101, 108, 108, 111, 32}, max_tokens);
    for (int32_t c = 'a'; c <= 'e'; ++c) r.params.allowed_token_ids.push_back(c);
    return r;
  }
  std::string Text(EngineRequest r) {
    Engine e(Config(), TinyModel(), tok);
    e.AddRequest(std::move(r));
    return RunAll(e).begin()->second.text[0];
  }
};

TEST_F(EngineText, StopStringsTrimHoldBackAndMayBeKept) {
  const std::string full = Text(Letters("full", 20));
  ASSERT_EQ(full.size(), 20u);
  for (char c : full) ASSERT_TRUE(c >= 'a' && c <= 'e') << full;
  const std::string stop = full.substr(9, 3);
  const size_t at = full.find(stop);
  EngineRequest r = Letters("stop", 20);
  r.params.stop = {"zzzz", stop};
  Engine e(Config(), TinyModel(), tok);
  e.AddRequest(r);
  // Streamed deltas never show the start of a stop string before it is known not to match.
  std::string streamed;
  bool finished = false;
  while (e.HasUnfinished())
    for (RequestOutput& o : e.Step())
      for (const CompletionDelta& d : o.completions) {
        streamed += d.text;
        if (!d.finish_reason) {
          EXPECT_EQ(full.compare(0, streamed.size(), streamed), 0);
        }
        if (d.finish_reason) {
          finished = true;
          EXPECT_EQ(*d.finish_reason, FinishReason::kStop);
          EXPECT_EQ(d.stop_string.value_or(""), stop);
        }
      }
  EXPECT_TRUE(finished);
  EXPECT_EQ(streamed, full.substr(0, at));
  r.request_id = "keep";
  r.params.include_stop_str_in_output = true;
  EXPECT_EQ(Text(r), full.substr(0, at + stop.size()));
}

TEST_F(EngineText, StopTokensMinTokensAndIgnoreEos) {
  const std::string full = Text(Letters("full", 12));
  const int32_t stop_tok = full[4];
  EngineRequest r = Letters("stoptok", 12);
  r.params.stop_token_ids = {stop_tok};
  const size_t first = full.find(static_cast<char>(stop_tok));
  Engine e(Config(), TinyModel(), tok);
  e.AddRequest(r);
  auto res = RunAll(e);
  EXPECT_EQ(res["stoptok"].text[0], full.substr(0, first));  // the stop token's text is left out
  EXPECT_EQ(res["stoptok"].last[0].stop_token_id.value_or(-1), stop_tok);
  EXPECT_EQ(res["stoptok"].tokens[0].size(), first + 1);
  // min_tokens holds the stop back: the stop token is masked until 6 tokens exist.
  r.request_id = "min";
  r.params.min_tokens = 6;
  const std::string held = Text(r);
  EXPECT_GE(held.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_NE(held[i], static_cast<char>(stop_tok)) << held;
}

TEST(AsyncEngine, StreamsOutputsAndAbortsDroppedStreams) {
  AsyncEngine ae(Config(), TinyModel(), std::nullopt);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) streams.push_back(ae.Submit(Greedy(Id("s", i), {1, 2, 3, i}, 12)));
  // Dropping a stream is how a vanished client aborts.
  streams[5].reset();
  for (int i = 0; i < 5; ++i) {
    size_t n = 0;
    bool done = false;
    while (!done) {
      auto o = streams[i]->Next(std::chrono::milliseconds(5000));
      ASSERT_TRUE(o.has_value()) << "no output for s" << i;
      for (const CompletionDelta& d : o->completions) n += d.token_ids.size();
      done = o->finished;
    }
    EXPECT_EQ(n, 12u);
    EXPECT_TRUE(streams[i]->finished());
  }
  EXPECT_THROW(ae.Submit(Greedy("bad", {1}, 0)), RequestError);
  for (int i = 0; i < 100 && ae.metrics().num_requests_running + ae.metrics().num_requests_waiting > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const EngineMetrics m = ae.metrics();
  EXPECT_EQ(m.num_requests_running, 0);
  EXPECT_EQ(m.num_requests_waiting, 0);
  EXPECT_EQ(m.kv_cache_usage, 0.0);
  EXPECT_TRUE(ae.healthy());
  ae.Shutdown(std::chrono::milliseconds(1000));
  EXPECT_ANY_THROW(ae.Submit(Greedy("late", {1}, 1)));
}

}  // namespace
}  // namespace vtllm::engine
