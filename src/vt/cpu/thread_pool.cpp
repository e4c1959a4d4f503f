#include "vt/cpu/thread_pool.h"

#include <algorithm>

namespace vt::cpu {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunk(int chunk) {
  // Chunk bounds are multiples of grain so vector kernels see aligned blocks.
  const int64_t blocks = (n_ + grain_ - 1) / grain_;
  const int64_t b0 = blocks * chunk / chunks_;
  const int64_t b1 = blocks * (chunk + 1) / chunks_;
  const int64_t begin = b0 * grain_;
  const int64_t end = std::min(n_, b1 * grain_);
  if (begin >= end) return;
  try {
    (*fn_)(begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::WorkerLoop(int /*index*/) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly: ops arrive back to back during a forward pass.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    seen = gen;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
    }
    for (int c = next_chunk_.fetch_add(1); c < chunks_; c = next_chunk_.fetch_add(1)) RunChunk(c);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t blocks = (n + grain - 1) / grain;
  const int chunks = static_cast<int>(std::min<int64_t>(num_threads_, blocks));
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  chunks_ = chunks;
  error_ = nullptr;
  next_chunk_.store(0);
  pending_.store(num_threads_ - 1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  for (int c = next_chunk_.fetch_add(1); c < chunks_; c = next_chunk_.fetch_add(1)) RunChunk(c);
  while (pending_.load(std::memory_order_acquire) != 0) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  fn_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace vt::cpu
