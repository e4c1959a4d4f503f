// A fixed pool of worker threads for the CPU backend. The calling thread takes part in
// every ParallelFor, so a pool of size 1 runs everything inline.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace vt::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // Splits [0, n) into at most size() contiguous chunks whose bounds are multiples of
  // `grain` (except the end) and runs fn(begin, end) on each; rethrows the first exception.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);
  void RunChunk(int chunk);

  const int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one ParallelFor at a time

  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;

  // The job being run.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  int chunks_ = 0;
  std::atomic<int> next_chunk_{0};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace vt::cpu
