// A fixed pool of worker threads for the CPU backend. The calling thread takes part in
// every ParallelFor, so a pool of size 1 runs everything inline.
//
// Hand-off: a job is published as one atomic ticket (generation, chunk count, next chunk)
// from which the caller and the workers claim chunks; the call returns when every chunk
// has run, whichever threads ran them, so a worker that has not woken yet costs nothing
// (the caller takes its chunk). Waiting threads spin briefly (ops arrive back to back in
// a forward pass), then yield the core, then sleep: when other processes share the
// cores, a descheduled thread gets them back instead of competing with spinners.
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
  void WorkerLoop();
  // Waits until the ticket's generation differs from `seen` (or stop); returns it.
  uint32_t WaitForJob(uint32_t seen);
  // Claims the next chunk of generation `gen`; false when none is left.
  bool TryClaim(uint32_t gen, int* chunk);
  void RunChunk(int chunk);
  void RunClaimed(uint32_t gen);

  const int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one ParallelFor at a time

  // generation << 32 | chunks << 16 | next chunk.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> done_{0};       // chunks finished in the current job
  std::atomic<int> sleepers_{0};   // workers blocked on wake_
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;

  // The job being run: written before its ticket is published, stable until every chunk
  // is done.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  int chunks_ = 0;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace vt::cpu
