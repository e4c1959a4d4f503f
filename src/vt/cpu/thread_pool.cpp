#include "vt/cpu/thread_pool.h"

#include <algorithm>

namespace vt::cpu {

namespace {

// Pause iterations before a waiting thread yields (tens of microseconds: covers the gap
// between consecutive ops of a forward pass), and yields before a worker sleeps.
constexpr int kSpinPauses = 4000;
constexpr int kYields = 200;
constexpr int kMaxChunks = 0xFFFF;

inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

inline uint32_t Gen(uint64_t ticket) { return static_cast<uint32_t>(ticket >> 32); }

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    ticket_.fetch_add(uint64_t{1} << 32);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ThreadPool::TryClaim(uint32_t gen, int* chunk) {
  uint64_t t = ticket_.load(std::memory_order_acquire);
  for (;;) {
    if (Gen(t) != gen) return false;
    const int chunks = static_cast<int>((t >> 16) & 0xFFFF);
    const int next = static_cast<int>(t & 0xFFFF);
    if (next >= chunks) return false;
    if (ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      *chunk = next;
      return true;
    }
  }
}

void ThreadPool::RunChunk(int chunk) {
  // Chunk bounds are multiples of grain so vector kernels see aligned blocks.
  const int64_t blocks = (n_ + grain_ - 1) / grain_;
  const int64_t b0 = blocks * chunk / chunks_;
  const int64_t b1 = blocks * (chunk + 1) / chunks_;
  const int64_t begin = b0 * grain_;
  const int64_t end = std::min(n_, b1 * grain_);
  if (begin < end) {
    try {
      (*fn_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::RunClaimed(uint32_t gen) {
  int c;
  while (TryClaim(gen, &c)) {
    RunChunk(c);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

uint32_t ThreadPool::WaitForJob(uint32_t seen) {
  for (int i = 0; i < kSpinPauses; ++i) {
    const uint32_t gen = Gen(ticket_.load(std::memory_order_acquire));
    if (gen != seen) return gen;
    CpuRelax();
  }
  for (int i = 0; i < kYields; ++i) {
    const uint32_t gen = Gen(ticket_.load(std::memory_order_acquire));
    if (gen != seen || stop_.load(std::memory_order_relaxed)) return gen;
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  sleepers_.fetch_add(1);
  wake_.wait(lock, [&] { return Gen(ticket_.load()) != seen || stop_.load(); });
  sleepers_.fetch_sub(1);
  return Gen(ticket_.load());
}

void ThreadPool::WorkerLoop() {
  uint32_t seen = Gen(ticket_.load());
  for (;;) {
    // A worker that starts late may first see the ticket after the destructor's bump, so
    // stop is checked on every wake-up, not only on generation changes.
    if (stop_.load()) return;
    seen = WaitForJob(seen);
    if (stop_.load()) return;
    RunClaimed(seen);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t blocks = (n + grain - 1) / grain;
  const int chunks = static_cast<int>(std::min<int64_t>({num_threads_, blocks, kMaxChunks}));
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
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = Gen(ticket_.load()) + 1;
  // Publishing and the sleepers check are sequentially consistent: either a worker about
  // to sleep sees the new ticket, or this thread sees it sleeping and wakes it.
  ticket_.store(uint64_t{gen} << 32 | uint64_t(chunks) << 16);
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }
    wake_.notify_all();
  }
  RunClaimed(gen);
  // Chunks claimed by workers may still run; spin briefly, then give the core away (the
  // thread running them may need it).
  for (int i = 0; done_.load(std::memory_order_acquire) != chunks; ++i) {
    if (i < kSpinPauses) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
  fn_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace vt::cpu
