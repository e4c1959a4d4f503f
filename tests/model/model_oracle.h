// Helpers for the model oracle tests: reading a reference.json written by a Hugging Face
// run (tests/fixtures/oracles/README.md, tools/oracle/model_oracle.py), running the engine
// on its prompts, and comparing logits and greedy continuations.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace vtllm::model::testing {

struct OracleCase {
  std::vector<int32_t> prompt, greedy;
  std::vector<double> margins;  // top-1 minus top-2 logit of the reference at each greedy step
  std::vector<float> logits;    // [T, V] of the prompt positions
  int64_t T = 0, V = 0;
};

inline std::vector<float> ReadF32File(const std::string& path, size_t count) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::vector<float> v(count);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(float)));
  EXPECT_EQ(static_cast<size_t>(f.gcount()), count * sizeof(float)) << path << " is short";
  return v;
}

// Reads `dir`/`name` (a reference.json) and its logits files.
inline std::vector<OracleCase> ReadOracle(const std::string& dir, const std::string& name = "reference.json") {
  std::ifstream f(dir + "/" + name);
  EXPECT_TRUE(f.good()) << "cannot open " << dir << "/" << name;
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<OracleCase> cases;
  for (const auto& c : j.at("cases")) {
    OracleCase oc;
    oc.prompt = c.at("prompt").get<std::vector<int32_t>>();
    oc.greedy = c.at("greedy").get<std::vector<int32_t>>();
    oc.margins = c.at("greedy_margins").get<std::vector<double>>();
    oc.T = c.at("logits_shape")[0].get<int64_t>();
    oc.V = c.at("logits_shape")[1].get<int64_t>();
    oc.logits = ReadF32File(dir + "/" + c.at("logits_file").get<std::string>(), static_cast<size_t>(oc.T * oc.V));
    cases.push_back(std::move(oc));
  }
  return cases;
}

// Logits of every prompt position, [T, V], from a fresh sequence.
inline std::vector<float> PromptLogits(Model& model, const std::vector<int32_t>& prompt) {
  KvCache cache = model.MakeKvCache(static_cast<int64_t>(prompt.size()) + 8, 16);
  SequenceKv seq;
  std::vector<int64_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  return model.Forward(prompt, pos, {&cache, &seq}, /*all_logits=*/true);
}

// The largest |a[i] - b[i]| (the sizes must match).
inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

inline int32_t Argmax(const float* row, int64_t V) {
  return static_cast<int32_t>(std::max_element(row, row + V) - row);
}

// Greedy continuation of `n` tokens: prefill, then one decode step per token; with
// `margins`, each step's top-1 minus top-2 logit is appended to it.
inline std::vector<int32_t> GreedyTokens(Model& model, const std::vector<int32_t>& prompt, int n,
                                         std::vector<double>* margins = nullptr) {
  const int64_t V = model.vocab_size();
  KvCache cache = model.MakeKvCache(static_cast<int64_t>(prompt.size()) + n + 1, 16);
  SequenceKv seq;
  std::vector<int64_t> pos(prompt.size());
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> logits = model.Forward(prompt, pos, {&cache, &seq});
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    if (margins) {
      std::vector<float> top(logits.begin(), logits.begin() + V);
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
      margins->push_back(static_cast<double>(top[0]) - top[1]);
    }
    const int32_t tok = Argmax(logits.data(), V);
    out.push_back(tok);
    if (i + 1 == n) break;
    const int64_t p = seq.num_tokens;
    logits = model.Forward(std::vector<int32_t>{tok}, std::vector<int64_t>{p}, {&cache, &seq});
  }
  return out;
}

// The number of leading greedy steps whose reference margin is at least `near_tie`: up to
// there a correct engine must agree token for token; from the first near-tie on, a tiny
// numeric difference may legitimately pick the other token.
inline size_t StepsBeforeNearTie(const std::vector<double>& margins, double near_tie = 1e-2) {
  size_t i = 0;
  while (i < margins.size() && margins[i] >= near_tie) ++i;
  return i;
}

struct LogitError {
  double max_abs = 0, ref_max_abs = 0;
};

inline LogitError CompareLogits(const std::vector<float>& got, const std::vector<float>& ref) {
  LogitError e;
  EXPECT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    EXPECT_TRUE(std::isfinite(got[i])) << "logit " << i << " is " << got[i];
    e.max_abs = std::max(e.max_abs, std::fabs(static_cast<double>(got[i]) - ref[i]));
    e.ref_max_abs = std::max(e.ref_max_abs, std::fabs(static_cast<double>(ref[i])));
  }
  return e;
}

inline LoadOptions CpuOptions(vt::DType dtype) {
  return {.device = vt::Device::Cpu(), .dtype = dtype, .cpu_threads = 2, .progress = false};
}

// Whether a CPU model of this processor's best level lays out its block / per-channel fp8
// weights at load (every x86 level from AVX2: the AVX2 rows' layout, or on AVX-512 BF16 with
// VBMI the static-FP8 outer-product layout; cpu/matmul/fp8_group_scaled.cpp).
inline bool LaysOutGroupScaledWeights() {
#if defined(__x86_64__)
  return vt::DetectCpuIsa() >= vt::CpuIsa::kAvx2;
#else
  return false;
#endif
}

struct OracleTolerance {
  double first_row = 0;   // max |logit - ref| at each prompt's position 0 (RoPE is the identity there)
  double all_rows = 0;    // max |logit - ref| over every prompt position
  bool greedy_to_near_tie = true;  // greedy tokens must agree up to the first near-tie
  double near_tie = 1e-2;          // a reference margin below this is a near-tie
  size_t greedy_min_agree = 0;     // otherwise: at least this many leading tokens must agree
};

// Runs every case: prompt logits within the tolerances of the reference, and greedy tokens
// as required. Prints the measured errors (the tests' tolerances cite them).
inline void CheckAgainstOracle(Model& model, const std::string& ref_dir, const OracleTolerance& tol,
                               const char* label, const std::string& ref_name = "reference.json") {
  const std::vector<OracleCase> cases = ReadOracle(ref_dir, ref_name);
  ASSERT_FALSE(cases.empty());
  for (size_t c = 0; c < cases.size(); ++c) {
    const OracleCase& oc = cases[c];
    ASSERT_EQ(oc.V, model.vocab_size());
    const std::vector<float> got = PromptLogits(model, oc.prompt);
    const LogitError e = CompareLogits(got, oc.logits);
    const LogitError e0 = CompareLogits(std::vector<float>(got.begin(), got.begin() + oc.V),
                                        std::vector<float>(oc.logits.begin(), oc.logits.begin() + oc.V));
    std::printf("[%s] case %zu (T=%lld): max |logit - ref| = %.3g, at position 0 %.3g (max |ref| %.3g)\n", label, c,
                static_cast<long long>(oc.T), e.max_abs, e0.max_abs, e.ref_max_abs);
    EXPECT_LE(e0.max_abs, tol.first_row) << label << " case " << c;
    EXPECT_LE(e.max_abs, tol.all_rows) << label << " case " << c;
    const std::vector<int32_t> greedy = GreedyTokens(model, oc.prompt, static_cast<int>(oc.greedy.size()));
    const size_t n = StepsBeforeNearTie(oc.margins, tol.near_tie);
    size_t agree = 0;
    while (agree < greedy.size() && greedy[agree] == oc.greedy[agree]) ++agree;
    std::printf("[%s] case %zu: greedy agrees on %zu of %zu tokens (first near-tie at step %zu)\n", label, c, agree,
                oc.greedy.size(), n);
    const size_t need = tol.greedy_to_near_tie ? n : std::min(tol.greedy_min_agree, greedy.size());
    for (size_t i = 0; i < need; ++i) ASSERT_EQ(greedy[i], oc.greedy[i]) << label << " case " << c << " step " << i;
  }
}

}  // namespace vtllm::model::testing
