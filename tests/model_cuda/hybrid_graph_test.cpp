// Hybrid Gated DeltaNet models' decode steps as CUDA graph replays. The scenario of
// tests/model/hybrid_decode_steps.h (5 sequences padded to bucket 8, 3 padded to 4, a new
// request at position 0 in a freed slot inside a replayed step, 4 in bucket 4, 1 in bucket 1)
// runs three times on one CUDA model: with graphs, padded but eager (the replay's inputs and
// shapes, run op by op), and plainly eager. Per fixture (qwen3-next-tiny, qwen3_5-tiny,
// qwen3_5-moe-tiny) and activation dtype (BF16, F32):
//  - every decode step of the graph run was a replay (graph_stats), every one of the padded
//    run ran padded;
//  - the replays' logits at every step and the final recurrent states of every slot equal the
//    padded eager run's bit for bit (a state the graph read or wrote at another address, or a
//    padding row touching a slot, would show here);
//  - no padding row wrote a slot no sequence held (they keep their fill pattern);
//  - against the plain eager steps (other GEMM shapes): f32 logits within TolFor's 2e-3, BF16
//    printed only (a BF16 rounding can flip a near-tie in these fixtures' routers).
// Without a GPU: SKIPPED.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "model/hybrid_decode_steps.h"
#include "model/model_oracle.h"
#include "vt/vt.h"

namespace vtllm::model {
namespace {

const std::string kFixtures = std::string(VTLLM_FIXTURES_DIR) + "/models/";

TEST(ModelCuda, HybridGraphReplaysEqualPaddedEagerSteps) {
  if (vt::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: skipped";
  for (const char* name : {"qwen3-next-tiny", "qwen3_5-tiny", "qwen3_5-moe-tiny"}) {
    const std::string dir = kFixtures + name;
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& c : testing::ReadOracle(dir)) prompts.push_back(c.prompt);
    for (vt::DType act : {vt::DType::kBF16, vt::DType::kF32}) {
      const std::string what = std::string(name) + " " + std::string(vt::DTypeName(act));
      LoadOptions o;
      o.device = vt::Device::Cuda(0);
      o.dtype = act;
      o.progress = false;
      auto m = Model::Load(dir, o);
      ASSERT_TRUE(m->has_recurrent_state()) << what;
      ASSERT_TRUE(m->step_graphs()) << what << ": graphs are on by default on CUDA, hybrids included";
      const int64_t V = m->vocab_size();

      const testing::DecodeRun graphs = testing::RunHybridDecodeSteps(*m, prompts);
      m->set_padded_eager_steps(true);
      const testing::DecodeRun padded = testing::RunHybridDecodeSteps(*m, prompts);
      m->set_padded_eager_steps(false);
      m->set_step_graphs(false);
      const testing::DecodeRun plain = testing::RunHybridDecodeSteps(*m, prompts);
      m->set_step_graphs(true);

      std::printf("[%s] graph run: %lld recorded, %lld replays, %lld eager steps\n", what.c_str(),
                  static_cast<long long>(graphs.stats.captures), static_cast<long long>(graphs.stats.replays),
                  static_cast<long long>(graphs.stats.eager));
      ASSERT_EQ(graphs.num_decode_steps, 9) << what;
      EXPECT_EQ(graphs.stats.replays, graphs.num_decode_steps) << what << ": decode steps that were not replays";
      EXPECT_GE(graphs.stats.captures, 3) << what << ": buckets 8, 4 and 1 each need a graph";
      EXPECT_EQ(graphs.stats.eager, 1) << what << ": only the prefill runs eagerly";
      EXPECT_EQ(padded.stats.padded_eager, padded.num_decode_steps) << what;
      EXPECT_EQ(padded.stats.replays, 0) << what;
      EXPECT_EQ(plain.stats.replays + plain.stats.padded_eager, 0) << what;

      EXPECT_EQ(testing::FirstLogitDifference(graphs, padded, V), "")
          << what << ": the replayed logits differ from the padded eager step's";
      EXPECT_EQ(testing::FirstStateDifference(graphs, padded), "")
          << what << ": the recurrent state after the replays differs from the padded eager run's";
      EXPECT_EQ(testing::UnusedSlotsChanged(graphs), "") << what << ": a replay wrote a slot no sequence held";
      EXPECT_EQ(testing::UnusedSlotsChanged(padded), "") << what;

      std::string where;
      const double err = testing::MaxStepLogitDiff(graphs, plain, V, &where);
      std::printf("[%s] replays vs plain eager steps: max |logit diff| = %.3g (at %s)\n", what.c_str(), err,
                  where.c_str());
      if (act == vt::DType::kF32) {
        EXPECT_LE(err, 2e-3) << what << " at " << where;
      }
    }
  }
}

}  // namespace
}  // namespace vtllm::model
