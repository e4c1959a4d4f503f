// The in-process communicator (vt/comm.h): ranks as threads of one process over CPU memory.
// The split models that use it are tested in tests/model/tensor_parallel_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "vt/comm.h"
#include "vt/error.h"
#include "vt/queue.h"
#include "vt/tensor.h"

namespace vt {
namespace {

TEST(InProcessComm, AllReduceSumsInRankOrderAndAllGatherPlacesColumns) {
  // Three ranks as threads; the sum is in rank order with f32 accumulation, on every rank.
  auto group = MakeInProcessGroup(3);
  Queue q = Queue::Cpu(1);
  std::vector<std::vector<float>> vals = {{1.0f, 1e8f, -2.5f}, {2.0f, 1.0f, 0.25f}, {4.0f, -1e8f, 1.0f}};
  std::vector<Tensor> xs, gathered;
  for (int r = 0; r < 3; ++r) {
    xs.push_back(Tensor::FromHost(vals[r].data(), {1, 3}, DType::kF32));
    gathered.push_back(Tensor::Empty({1, 9}, DType::kF32));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      group[r]->AllGatherColumns(q, xs[r], gathered[r]);
      group[r]->AllReduceSum(q, xs[r]);
    });
  for (auto& t : threads) t.join();
  // (1e8 + 1) rounds to 1e8 in f32 before -1e8 is added: rank order, not a reordered sum.
  const float want[3] = {7.0f, (1e8f + 1.0f) + -1e8f, -1.25f};
  for (int r = 0; r < 3; ++r) {
    std::vector<float> got(3), all(9);
    xs[r].CopyToHost(got.data());
    gathered[r].CopyToHost(all.data());
    for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], want[i]) << r << " " << i;
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < 3; ++i) EXPECT_EQ(all[k * 3 + i], vals[k][i]);
    EXPECT_EQ(group[r]->num_collectives(), 2);
  }
}

TEST(InProcessComm, MismatchedRanksAndABrokenGroupThrowInsteadOfHanging) {
  auto group = MakeInProcessGroup(2);
  Queue q = Queue::Cpu(1);
  Tensor a = Tensor::Empty({4}, DType::kF32), b = Tensor::Empty({5}, DType::kF32);
  std::string e0, e1;
  std::thread t([&] {
    try {
      group[1]->AllReduceSum(q, b);
    } catch (const Error& e) {
      e1 = e.what();
    }
  });
  try {
    group[0]->AllReduceSum(q, a);
  } catch (const Error& e) {
    e0 = e.what();
  }
  t.join();
  EXPECT_NE(e0.find("different shape"), std::string::npos) << e0;
  EXPECT_NE(e1.find("different shape"), std::string::npos) << e1;
  // A broken group: a rank waiting at a collective throws instead of waiting for ever.
  auto g2 = MakeInProcessGroup(2);
  AbortGroup(*g2[1], "rank 1 failed");
  try {
    g2[0]->AllReduceSum(q, a);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 failed"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vt
