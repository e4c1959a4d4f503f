// StepInput::device_tokens (async scheduling): token ids the device supplies give the same
// logits, bit for bit, as the same ids sent from the host; rows and sources out of range are
// refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/model.h"
#include "model/step_input.h"
#include "model_oracle.h"
#include "vt/error.h"

namespace vtllm::model {
namespace {

const std::string kTiny = std::string(VTLLM_FIXTURES_DIR) + "/oracles/qwen3-tiny/bf16";

// Two sequences (a 3-token prefill, a 1-token decode after a 2-token prefill), the logits of
// their last rows. `device`: tokens[1] of the first and the decode token come from the device.
std::vector<float> TwoSteps(Model& m, bool device) {
  const KvCacheTensors cache = m.MakeKvCacheTensors(8, 4);
  const std::vector<int32_t> t0 = {11, 42, 7}, t1 = {5, 9}, t1_next = {23};
  const std::vector<int32_t> table0 = {0}, table1 = {1};
  StepInput step;
  step.Clear(1);
  step.AddSequence(t1, 0, table1, 4);
  step.logit_rows = {1};
  m.Execute(step, cache);

  step.Clear(1);
  std::vector<int32_t> a = t0, b = t1_next;
  vt::Tensor source = vt::Tensor::Empty({4}, vt::DType::kI32, m.queue().device());
  if (device) {
    // Source ids {x, 42, 23, x}: rows 1 and 2 of the step from sources 1 and 2 (one run).
    const std::vector<int32_t> ids = {-1, a[1], b[0], -1};
    source.CopyFrom(vt::Tensor::Borrow(const_cast<int32_t*>(ids.data()), {4}, vt::DType::kI32, vt::Device::Cpu(), nullptr));
    a[1] = 0, b[0] = 0;
  }
  const int32_t r0 = step.AddSequence(a, 0, table0, 4);
  const int32_t r1 = step.AddSequence(b, 2, table1, 4);
  step.logit_rows = {r0 + 2, r1};
  if (device) {
    step.device_tokens = {{r0 + 1, 1}, {r1, 2}};
    step.device_token_source = source;
  }
  const vt::Tensor logits = m.Execute(step, cache);
  std::vector<float> out(static_cast<size_t>(logits.numel()));
  logits.CopyToHost(out.data());
  return out;
}

TEST(DeviceTokens, SameLogitsAsHostTokens) {
  auto m = Model::Load(kTiny, testing::CpuOptions(vt::DType::kF32));
  m->ReserveStepBuffers({16, 4, 4, 4});
  const std::vector<float> host = TwoSteps(*m, false), device = TwoSteps(*m, true);
  ASSERT_EQ(host.size(), device.size());
  for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(host[i], device[i]) << i;
}

TEST(DeviceTokens, OutOfRangeIsRefusedByName) {
  auto m = Model::Load(kTiny, testing::CpuOptions(vt::DType::kF32));
  const KvCacheTensors cache = m->MakeKvCacheTensors(4, 4);
  StepInput step;
  step.Clear(1);
  const std::vector<int32_t> t = {1, 2}, table = {0};
  step.AddSequence(t, 0, table, 4);
  step.logit_rows = {1};
  step.device_token_source = vt::Tensor::Empty({2}, vt::DType::kI32, m->queue().device());
  for (auto [d, what] : std::vector<std::pair<StepInput::DeviceToken, std::string>>{
           {{2, 0}, "device token row 2"}, {{0, 2}, "device token source 2"}}) {
    step.device_tokens = {d};
    try {
      m->Execute(step, cache);
      ADD_FAILURE() << "no error for " << what;
    } catch (const vt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace vtllm::model
