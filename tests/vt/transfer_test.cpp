// vt/transfer.h on a CPU queue: the copies land at once, events are complete, and memory
// outside the staging buffer or the tensor is refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "vt/error_of.h"
#include "vt/transfer.h"
#include "vt/vt.h"

namespace {

using vtt::ErrorOf;

TEST(Transfer, CpuCopiesRoundTripThroughStaging) {
  vt::Queue q = vt::Queue::Cpu(1);
  vt::HostBuffer in(q, 64 * sizeof(int32_t)), out(q, 64 * sizeof(int32_t));
  auto* src = static_cast<int32_t*>(in.data());
  std::iota(src, src + 64, 100);
  vt::Tensor dev = vt::Tensor::Empty({64}, vt::DType::kI32, q.device());
  vt::Tensor dev2 = vt::Tensor::Empty({64}, vt::DType::kI32, q.device());
  vt::CopyToDeviceAsync(q, dev, in, src, 64 * sizeof(int32_t));
  vt::CopyOnDeviceAsync(q, dev2, dev.Slice(0, 8, 64), 56 * sizeof(int32_t));
  auto* dst = static_cast<int32_t*>(out.data());
  vt::CopyToHostAsync(q, out, dst, dev2, 56 * sizeof(int32_t));
  const vt::Event done = vt::Event::Record(q);
  EXPECT_TRUE(done.Ready());
  done.Wait();
  for (int i = 0; i < 56; ++i) ASSERT_EQ(dst[i], 108 + i) << i;
}

TEST(Transfer, MemoryOutsideTheStagingBufferIsRefused) {
  vt::Queue q = vt::Queue::Cpu(1);
  vt::HostBuffer staging(q, 16);
  std::vector<char> pageable(16);
  vt::Tensor dev = vt::Tensor::Empty({16}, vt::DType::kU8, q.device());
  std::string msg = ErrorOf([&] { vt::CopyToDeviceAsync(q, dev, staging, pageable.data(), 16); });
  EXPECT_NE(msg.find("CopyToDeviceAsync"), std::string::npos) << msg;
  EXPECT_NE(msg.find("staging HostBuffer"), std::string::npos) << msg;
  // One byte past the end.
  msg = ErrorOf([&] { vt::CopyToHostAsync(q, staging, static_cast<char*>(staging.data()) + 1, dev, 16); });
  EXPECT_NE(msg.find("CopyToHostAsync"), std::string::npos) << msg;
  // More bytes than the tensor holds.
  msg = ErrorOf([&] { vt::CopyToDeviceAsync(q, dev.Slice(0, 0, 8), staging, staging.data(), 16); });
  EXPECT_NE(msg.find("16 bytes"), std::string::npos) << msg;
  EXPECT_FALSE(staging.Contains(static_cast<char*>(staging.data()) + 8, 9));
  EXPECT_TRUE(staging.Contains(static_cast<char*>(staging.data()) + 8, 8));
}

}  // namespace
