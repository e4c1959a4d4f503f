// vt/transfer.h on CUDA: copies enqueued behind the queue's work return before that work is
// done, the event says when it is, and a kernel's index error surfaces at Event::Wait.
#include <numeric>

#include "cuda_test_util.h"
#include "vt/transfer.h"

namespace {

TEST(CudaTransfer, CopiesReturnBeforeTheWorkAheadOfThemEnds) {
  VT_REQUIRE_CUDA();
  vt::Queue q = vt::Queue::Cuda(0);
  constexpr int64_t kBig = int64_t{256} << 20;
  vt::Tensor a = vt::Tensor::Empty({kBig}, vt::DType::kU8, vtt::kCuda);
  vt::Tensor b = vt::Tensor::Empty({kBig}, vt::DType::kU8, vtt::kCuda);
  vt::HostBuffer in(q, 1024 * sizeof(int32_t)), out(q, 1024 * sizeof(int32_t));
  auto* src = static_cast<int32_t*>(in.data());
  std::iota(src, src + 1024, -7);
  vt::Tensor dev = vt::Tensor::Empty({1024}, vt::DType::kI32, vtt::kCuda);
  vt::Tensor dev2 = vt::Tensor::Empty({1024}, vt::DType::kI32, vtt::kCuda);
  q.Synchronize();
  // About 50 GB of device copies (tens of milliseconds) ahead of the small ones.
  for (int i = 0; i < 100; ++i) vt::CopyOnDeviceAsync(q, i % 2 ? a : b, i % 2 ? b : a, kBig);
  vt::CopyToDeviceAsync(q, dev, in, src, 1024 * sizeof(int32_t));
  vt::CopyOnDeviceAsync(q, dev2, dev, 1024 * sizeof(int32_t));
  auto* dst = static_cast<int32_t*>(out.data());
  vt::CopyToHostAsync(q, out, dst, dev2, 1024 * sizeof(int32_t));
  const vt::Event done = vt::Event::Record(q);
  EXPECT_FALSE(done.Ready()) << "the host waited for the queue's work";
  done.Wait();
  EXPECT_TRUE(done.Ready());
  for (int i = 0; i < 1024; ++i) ASSERT_EQ(dst[i], i - 7) << i;
}

TEST(CudaTransfer, PageableHostMemoryIsRefused) {
  VT_REQUIRE_CUDA();
  vt::Queue q = vt::Queue::Cuda(0);
  vt::HostBuffer staging(q, 64);
  std::vector<char> pageable(64);
  vt::Tensor dev = vt::Tensor::Empty({64}, vt::DType::kU8, vtt::kCuda);
  try {
    vt::CopyToDeviceAsync(q, dev, staging, pageable.data(), 64);
    ADD_FAILURE() << "no error";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("staging HostBuffer"), std::string::npos) << e.what();
  }
}

TEST(CudaTransfer, IndexErrorSurfacesAtEventWait) {
  VT_REQUIRE_CUDA();
  vt::Queue q = vt::Queue::Cuda(0);
  vt::HostBuffer staging(q, 4 * sizeof(int32_t));
  auto* ids = static_cast<int32_t*>(staging.data());
  ids[0] = 1, ids[1] = 99, ids[2] = 0, ids[3] = 2;  // 99: outside the 4-row table
  vt::Tensor dev_ids = vt::Tensor::Empty({4}, vt::DType::kI32, vtt::kCuda);
  vt::Tensor table = vt::Tensor::Empty({4, 8}, vt::DType::kF32, vtt::kCuda);
  vt::Tensor out = vt::Tensor::Empty({4, 8}, vt::DType::kF32, vtt::kCuda);
  vt::CopyToDeviceAsync(q, dev_ids, staging, ids, 4 * sizeof(int32_t));
  vt::Embedding(q, out, table, dev_ids);
  const vt::Event done = vt::Event::Record(q);
  try {
    done.Wait();
    ADD_FAILURE() << "no error";
  } catch (const vt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Embedding: ids[1] = 99"), std::string::npos) << e.what();
  }
  q.Synchronize();  // the record was cleared: nothing more to report
}

}  // namespace
