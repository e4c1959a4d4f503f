// CPU queues: the thread count and ISA level they report, and ParallelFor's contract
// (every index once, chunk bounds on multiples of the grain, exceptions rethrown).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
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

// What the processor detection found (printed, so that a run under qemu with different CPU
// models shows the difference) and the levels this build has kernels for.
TEST(Queue, CpuDetectionReportsLevelsAndFeatures) {
  const std::vector<vt::CpuIsa> levels = vt::CpuIsaLevels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), vt::CpuIsa::kScalar);
  EXPECT_NE(std::find(levels.begin(), levels.end(), vt::DetectCpuIsa()), levels.end());
  const std::vector<std::string> features = vt::CpuFeatures();
  std::string names;
  for (const std::string& f : features) names += " " + f;
  std::printf("[ CPU: detected %s; features:%s ]\n", vt::CpuIsaName(vt::DetectCpuIsa()),
              names.empty() ? " (none)" : names.c_str());
  auto has = [&](const char* f) { return std::find(features.begin(), features.end(), f) != features.end(); };
#if defined(__aarch64__)
  EXPECT_EQ(levels, (std::vector<vt::CpuIsa>{vt::CpuIsa::kScalar, vt::CpuIsa::kNeon, vt::CpuIsa::kNeonBf16}));
  EXPECT_TRUE(has("asimd")) << "every aarch64 Linux processor has NEON";
  EXPECT_EQ(vt::DetectCpuIsa(), has("bf16") ? vt::CpuIsa::kNeonBf16 : vt::CpuIsa::kNeon);
  if (has("sve2")) {
    EXPECT_TRUE(has("sve"));
  }
  // An x86 level asked of an ARM queue gives the highest ARM level below it: scalar.
  EXPECT_EQ(vt::Queue::Cpu(1, vt::CpuIsa::kAmx).cpu_isa(), vt::CpuIsa::kScalar);
#elif defined(__x86_64__)
  EXPECT_EQ(levels.size(), 5u);
  if (vt::DetectCpuIsa() >= vt::CpuIsa::kAvx2) {
    EXPECT_TRUE(has("avx2") && has("fma") && has("f16c"));
  }
  if (vt::DetectCpuIsa() >= vt::CpuIsa::kAvx512) {
    EXPECT_TRUE(has("avx512f"));
  }
  EXPECT_EQ(has("amx"), vt::DetectCpuIsa() == vt::CpuIsa::kAmx);
  // ARM levels asked of an x86 queue give the highest x86 level the processor has.
  EXPECT_EQ(vt::Queue::Cpu(1, vt::CpuIsa::kNeonBf16).cpu_isa(), vt::DetectCpuIsa());
#endif
  // Under qemu, scripts/build_aarch64.sh names the level each CPU model must be detected as,
  // so that a detection that finds less (and runs narrower kernels) fails.
  if (const char* want = std::getenv("VTLLM_EXPECT_CPU_ISA"); want != nullptr && *want != '\0') {
    EXPECT_STREQ(vt::CpuIsaName(vt::DetectCpuIsa()), want);
  }
  (void)has;
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
