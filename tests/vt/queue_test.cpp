// CPU queues: the thread count and ISA level they report, and ParallelFor's contract
// (every index once, chunk bounds on multiples of the grain, exceptions rethrown).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "vt/vt.h"

namespace {

TEST(Queue, CpuReportsThreadsAndIsa) {
  vt::Queue q = vt::Queue::Cpu(3, vt::CpuIsa::kScalar);
  EXPECT_EQ(q.device(), vt::Device::Cpu());
  EXPECT_EQ(q.num_threads(), 3);
  EXPECT_EQ(q.cpu_isa(), vt::CpuIsa::kScalar);
  EXPECT_EQ(vt::Queue::Cpu(1).cpu_isa(), vt::DetectCpuIsa());
  EXPECT_GE(vt::Queue::Cpu(0).num_threads(), 1);
}

TEST(Queue, ParallelForCoversEveryIndexOnceOnGrainBoundaries) {
  for (int threads : {1, 2, 5}) {
    vt::Queue q = vt::Queue::Cpu(threads);
    for (int64_t n : {1, 7, 64, 1000, 100003}) {
      for (int64_t grain : {1, 16, 4096}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::mutex m;
        bool aligned = true;
        q.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
          if (b % grain != 0 || (e != n && e % grain != 0)) {
            std::lock_guard<std::mutex> lock(m);
            aligned = false;
          }
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        });
        EXPECT_TRUE(aligned) << "n=" << n << " grain=" << grain << " threads=" << threads;
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i;
      }
    }
  }
}

TEST(Queue, ParallelForRethrowsAndStaysUsable) {
  vt::Queue q = vt::Queue::Cpu(4);
  EXPECT_THROW(q.ParallelFor(1000, 10, [](int64_t b, int64_t) {
    if (b > 0) throw std::runtime_error("boom");
  }), std::runtime_error);
  std::atomic<int64_t> sum{0};
  q.ParallelFor(100, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 100);
}

}  // namespace

// A CPU queue records no graph: Capture says so, returns an undefined Graph, and neither runs
// nor keeps the function (the caller then runs the work itself). Replaying an undefined graph
// is an error, not a crash.
TEST(Graph, CpuQueueRecordsNothingAndSaysWhy) {
  const vt::Queue q = vt::Queue::Cpu(1);
  int ran = 0;
  std::string why;
  const vt::Graph g = vt::Graph::Capture(q, [&] { ++ran; }, &why);
  EXPECT_FALSE(g.defined());
  EXPECT_EQ(ran, 0);
  EXPECT_NE(why.find("cpu"), std::string::npos) << why;
  EXPECT_THROW(g.Replay(), vt::Error);
}
