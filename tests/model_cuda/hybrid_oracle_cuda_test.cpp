// The hybrid Gated DeltaNet fixtures on CUDA against Hugging Face transformers itself: each
// fixture's reference.json (made by tools/oracle/gdn_oracle.py and gdn_moe_oracle.py: HF in
// float32 on the fixture's BF16 weights) against the CUDA model with F32 activations, every
// prompt position's logits within the stated bound and greedy tokens equal up to the first
// near-tie, as the CPU oracle tests (tests/model/hybrid_oracle_test.cpp) check the CPU. The
// dispatch counts prove the CUDA GDN kernels ran.
#include <gtest/gtest.h>

#include <string>

#include "model/loader_test_util.h"
#include "model/model_oracle.h"
#include "vt/vt.h"

namespace vtllm::model {
namespace {

std::string Fixture(const char* name) { return testing::FixturesRoot() + "/models/" + name; }

// f32 on CUDA runs the same arithmetic as on the CPU but for the order of its sums (matmuls,
// the delta rule's tiles, attention). The bounds are the CPU oracle tests': an H100 measured
// at most 2.2e-5 at position 0 and 5.3e-5 over all positions (qwen3_5-tiny, 61 tokens).
void CheckOnCuda(const char* name) {
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  const std::string dir = Fixture(name);
  const LoadOptions opt{.device = vt::Device::Cuda(0), .dtype = vt::DType::kF32, .cpu_threads = 2, .progress = false};
  auto model = Model::Load(dir, opt);
  ASSERT_TRUE(model->has_recurrent_state()) << dir;
  const int64_t rule = vt::DispatchCount(vt::OpId::kGatedDeltaRule, vt::DeviceType::kCUDA);
  const int64_t conv = vt::DispatchCount(vt::OpId::kCausalConv1d, vt::DeviceType::kCUDA);
  testing::CheckAgainstOracle(*model, dir, {.first_row = 1e-4, .all_rows = 2e-4}, name);
  EXPECT_GT(vt::DispatchCount(vt::OpId::kGatedDeltaRule, vt::DeviceType::kCUDA), rule) << dir;
  EXPECT_GT(vt::DispatchCount(vt::OpId::kCausalConv1d, vt::DeviceType::kCUDA), conv) << dir;
}

TEST(HybridOracleCuda, Qwen3NextF32MatchesHfFloat32) { CheckOnCuda("qwen3-next-tiny"); }
TEST(HybridOracleCuda, Qwen3_5F32MatchesHfFloat32) { CheckOnCuda("qwen3_5-tiny"); }
TEST(HybridOracleCuda, Qwen3_5MoeF32MatchesHfFloat32) { CheckOnCuda("qwen3_5-moe-tiny"); }

}  // namespace
}  // namespace vtllm::model
