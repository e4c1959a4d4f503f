// What the online-FP8 tests (`--quantization fp8` of a BF16 checkpoint) share: the load
// options, and the comparison of a float32 model's logits at every prompt position of a
// fixture's oracle with the float64 emulation of the format (fp8_reference_forward.h).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <string>
#include <vector>

#include "fp8_reference_forward.h"
#include "model_oracle.h"

namespace vtllm::model::testing {

inline LoadOptions OnlineFp8Options(vt::DType dtype) {
  LoadOptions o = CpuOptions(dtype);
  o.quantization = "fp8";
  return o;
}

// The largest |a[i] - b[i]| over [begin, end).
inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<double>& b, size_t begin, size_t end) {
  double m = 0;
  for (size_t i = begin; i < end; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

struct EmulationAgreement {
  double worst = 0;        // max |logit - emulation| over every position
  int flipped = 0;         // positions whose max difference is above 1e-4 (an e4m3 code flipped)
  int positions = 0;
  double fp8_vs_bf16 = 0;  // max |emulation - BF16 model|: how far the format moves the logits
};

// `model` (online FP8, float32 activations) against the emulation over `dir`'s oracle prompts.
inline EmulationAgreement CompareWithOnlineFp8Emulation(Model& model, const std::string& dir) {
  ReferenceForward emu(dir, RefMode::kOnlineFp8), bf16(dir, RefMode::kBf16);
  const int64_t V = model.vocab_size();
  EmulationAgreement a;
  for (const OracleCase& c : ReadOracle(dir)) {
    const std::vector<float> got = PromptLogits(model, c.prompt);
    const std::vector<double> ref = emu.Logits(c.prompt), ref_bf16 = bf16.Logits(c.prompt);
    for (int64_t t = 0; t < c.T; ++t) {
      const double d = MaxAbsDiff(got, ref, t * V, (t + 1) * V);
      a.worst = std::max(a.worst, d);
      a.flipped += d > 1e-4;
      ++a.positions;
      for (int64_t v = 0; v < V; ++v)
        a.fp8_vs_bf16 = std::max(a.fp8_vs_bf16, std::fabs(ref[t * V + v] - ref_bf16[t * V + v]));
    }
  }
  std::printf("online fp8 vs emulation (%s): max %.3g over %d positions, %d above 1e-4; emulation vs bf16: %.3g\n",
              dir.c_str(), a.worst, a.positions, a.flipped, a.fp8_vs_bf16);
  return a;
}

// The float32 online-FP8 model of `dir` against the emulation: only summation orders differ,
// so a position's logits agree to 1e-4 unless an activation sits on an e4m3 rounding boundary
// and its code flips; at most a tenth of the positions may show one, none by more than 0.1.
// The emulation must be at least `min_fp8_vs_bf16` away from the BF16 model, so that the
// bound tells a wrong scale or rounding from a right one.
inline void ExpectOnlineFp8MatchesEmulation(const std::string& dir, double min_fp8_vs_bf16) {
  auto model = Model::Load(dir, OnlineFp8Options(vt::DType::kF32));
  ASSERT_EQ(model->quant().method, QuantMethod::kFp8Online);
  const EmulationAgreement a = CompareWithOnlineFp8Emulation(*model, dir);
  EXPECT_LE(a.worst, 0.1);
  EXPECT_LE(a.flipped, a.positions / 10);
  EXPECT_GE(a.fp8_vs_bf16, min_fp8_vs_bf16);
}

}  // namespace vtllm::model::testing
