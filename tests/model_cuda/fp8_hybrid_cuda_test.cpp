// FP8 of the hybrid Gated DeltaNet fixtures on CUDA against the float64 emulation of the
// format (tests/model/hybrid_fp8_reference.h), with the rule of the CPU tests
// (tests/model/online_fp8_hybrid_test.cpp, static_fp8_hybrid_test.cpp): f32 logits agree at
// every prompt position up to the prompt's first e4m3 code flip, position 0 always, and at least
// half of the positions come before a flip; here "agree" is 2e-3 (TolFor's f32 bound of the
// CUDA tests: the CUDA GEMMs sum in another order) where the CPU tests use 1e-4.
//  - online FP8 of the three fixtures (the MoE ones' experts through the CUDA
//    MoeExpertsFp8PerToken kernel, whose dispatch is counted);
//  - static FP8 (ModelOpt) of qwen3-next-tiny and qwen3_5-tiny as `vtllm quantize` writes them,
//    every GDN projection included;
//  - the HF-made static FP8 fixtures (qwen3_5-tiny-fp8, qwen3-next-tiny-fp8,
//    qwen3_5-moe-tiny-fp8) against their HF references.
// Without a GPU: SKIPPED.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/hybrid_fp8_reference.h"
#include "model/loader_test_util.h"
#include "model/model_oracle.h"
#include "model/quantized_fixture.h"
#include "vt/vt.h"

namespace vtllm::model {
namespace {

const std::string kFixtures = testing::FixturesRoot() + "/models/";

LoadOptions Cuda(const std::string& quantization) {
  LoadOptions o;
  o.device = vt::Device::Cuda(0);
  o.dtype = vt::DType::kF32;
  o.cpu_threads = 2;
  o.progress = false;
  o.quantization = quantization;
  return o;
}

// `reference` gives a prompt's [T, V] logits.
template <typename Reference>
void CheckUpToTheFirstFlip(const std::string& what, const char* against, Model& model, const std::string& prompts_dir,
                           Reference reference, double min_unflipped) {
  const int64_t V = model.vocab_size();
  int before = 0, after = 0, flipped_at_0 = 0;
  double worst = 0;
  for (const testing::OracleCase& oc : testing::ReadOracle(prompts_dir)) {
    const std::vector<float> got = testing::PromptLogits(model, oc.prompt);
    const std::vector<double> ref = reference(oc);
    bool flipped = false;
    for (int64_t t = 0; t < oc.T; ++t) {
      double d = 0;
      for (int64_t v = t * V; v < (t + 1) * V; ++v) d = std::max(d, std::fabs(got[v] - ref[v]));
      flipped = flipped || !(d <= 2e-3);
      flipped_at_0 += t == 0 && flipped;
      if (!flipped) worst = std::max(worst, d);
      (flipped ? after : before)++;
    }
  }
  std::printf("[%s] cuda vs %s: max %.3g over %d positions before a flip, %d from there\n", what.c_str(), against,
              worst, before, after);
  EXPECT_EQ(flipped_at_0, 0) << what;
  EXPECT_GE(before, min_unflipped * (before + after)) << what;
}

void CheckAgainstEmulation(const std::string& what, Model& model, const std::string& prompts_dir,
                           testing::HybridReference& emu, double min_unflipped) {
  CheckUpToTheFirstFlip(what, "float64 emulation", model, prompts_dir,
                        [&](const testing::OracleCase& oc) { return emu.Logits(oc.prompt); }, min_unflipped);
}

TEST(ModelCuda, OnlineFp8HybridMatchesTheFloat64Emulation) {
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  for (const char* name : {"qwen3_5-tiny", "qwen3-next-tiny", "qwen3_5-moe-tiny"}) {
    const std::string dir = kFixtures + name;
    const int64_t experts = vt::DispatchCount(vt::OpId::kMoeExpertsFp8PerToken, vt::DeviceType::kCUDA);
    auto model = Model::Load(dir, Cuda("fp8"));
    ASSERT_EQ(model->quant().method, QuantMethod::kFp8Online);
    testing::HybridReference emu(dir, testing::HybridMode::kOnline);
    CheckAgainstEmulation(std::string(name) + " online", *model, dir, emu, 0.5);
    if (std::string(name) != "qwen3_5-tiny") {
      EXPECT_GT(vt::DispatchCount(vt::OpId::kMoeExpertsFp8PerToken, vt::DeviceType::kCUDA), experts) << name;
    }
  }
}

TEST(ModelCuda, StaticFp8HybridMatchesTheFloat64Emulation) {
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  for (const char* name : {"qwen3-next-tiny", "qwen3_5-tiny"}) {
    const std::string src = kFixtures + name;
    testing::TempDir tmp;
    const std::string out = tmp / "q";
    testing::QuantizeStaticFp8(src, out, "modelopt");
    auto model = Model::Load(out, Cuda(""));
    ASSERT_EQ(model->quant().method, QuantMethod::kFp8Static);
    testing::HybridReference emu(out, testing::HybridMode::kStatic);
    CheckAgainstEmulation(std::string(name) + " static", *model, src, emu, 0.5);
  }
}

// The HF-made static FP8 fixtures (tools/oracle/gdn_moe_oracle.py --only fp8 / fp8-next /
// fp8-moe: transformers in f32 with every quantized linear and the routed experts replaced by
// the FP8 emulation) against the CUDA model, the rule above; the sparse fixtures' experts run
// the CUDA static-FP8 expert kernel (its dispatch counted).
TEST(ModelCuda, StaticFp8HybridMatchesHfEmulation) {
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  for (const char* name : {"qwen3_5-tiny-fp8", "qwen3-next-tiny-fp8", "qwen3_5-moe-tiny-fp8"}) {
    const std::string dir = kFixtures + name;
    const int64_t experts = vt::DispatchCount(vt::OpId::kMoeExpertsFp8, vt::DeviceType::kCUDA);
    auto model = Model::Load(dir, Cuda(""));
    ASSERT_EQ(model->quant().method, QuantMethod::kFp8Static);
    CheckUpToTheFirstFlip(name, "HF's FP8 emulation", *model, dir, [](const testing::OracleCase& oc) {
      return std::vector<double>(oc.logits.begin(), oc.logits.end());
    }, 0.5);
    if (std::string(name) != "qwen3_5-tiny-fp8") {
      EXPECT_GT(vt::DispatchCount(vt::OpId::kMoeExpertsFp8, vt::DeviceType::kCUDA), experts) << name;
    }
  }
}

}  // namespace
}  // namespace vtllm::model
