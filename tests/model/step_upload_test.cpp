// The step's input arena (model/step_upload.h): each array lands at its view, a step that
// outgrows the reservation is refused by name, and a wider block table moves the step
// buffers' generation (recorded graphs read the arena at offsets laid out with the old
// width) even when the arena keeps its size.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/layers/activation_buffers.h"
#include "model/model.h"
#include "model/step_upload.h"
#include "model_oracle.h"
#include "vt/error.h"

namespace vtllm::model {
namespace {

TEST(StepUpload, ArraysLandAtTheirViews) {
  vt::Queue q = vt::Queue::Cpu(1);
  StepUpload up;
  EXPECT_TRUE(up.Reserve(q, 256));
  EXPECT_FALSE(up.Reserve(q, 128));
  for (int step = 0; step < 3; ++step) {  // both staging buffers, twice
    up.Begin();
    const std::vector<int32_t> a = {1 + step, 2, 3};
    const std::vector<int64_t> b = {-5, int64_t{1} << 40};
    const vt::Tensor va = up.Add(a.data(), 3, vt::DType::kI32);
    const vt::Tensor vb = up.Add(b.data(), 2, vt::DType::kI64);
    up.Upload();
    EXPECT_EQ(va.data_as<int32_t>()[0], 1 + step);
    EXPECT_EQ(va.data_as<int32_t>()[2], 3);
    EXPECT_EQ(vb.data_as<int64_t>()[1], int64_t{1} << 40);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(vb.data()) % 16, 0u);
  }
  up.Begin();
  std::vector<int32_t> big(100);
  try {
    up.Add(big.data(), 100, vt::DType::kI32);
    ADD_FAILURE() << "no error";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("outgrow the 256 bytes"), std::string::npos) << e.what();
  }
}

TEST(StepUpload, WiderBlockTableMovesTheGeneration) {
  auto m = Model::Load(std::string(VTLLM_FIXTURES_DIR) + "/oracles/qwen3-tiny/bf16",
                       testing::CpuOptions(vt::DType::kF32));
  // One sequence: a block table of 1 or 2 entries rounds up to the same 16 bytes, so the
  // arena keeps its size (a one-sequence decode step whose context crosses a block).
  m->ReserveStepBuffers({4, 1, 1, 1});
  const uint64_t g0 = StepBufferGeneration().load();
  m->ReserveStepBuffers({2, 1, 1, 1});  // within what is reserved: nothing moves
  EXPECT_EQ(StepBufferGeneration().load(), g0);
  m->ReserveStepBuffers({2, 1, 2, 1});
  EXPECT_NE(StepBufferGeneration().load(), g0);
}

}  // namespace
}  // namespace vtllm::model
