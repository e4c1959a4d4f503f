// A load progress bar on stderr.
//
//   LoadProgress p(total_bytes, "Loading weights");
//   for (...) { ...load one tensor...; p.Advance(tensor_bytes); }
//
// On a terminal it draws one line redrawn in place (at most every 100 ms); elsewhere (logs,
// tests) it stays silent unless the load has run for more than a second, and then prints a
// plain line at most every 2 s. A final line with the total time is printed only if
// anything was shown. Advance may be called from several threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>

namespace vtllm::model {

class LoadProgress {
 public:
  struct Options {
    std::ostream* out = nullptr;  // nullptr: std::cerr
    int tty = -1;                 // -1: ask isatty(stderr); 0/1 to force (tests)
    double quiet_seconds = 1.0;   // non-terminal: silent until the load has run this long
    double tty_interval_seconds = 0.1;
    double log_interval_seconds = 2.0;
    const char* unit = nullptr;   // counts of this unit ("tokens") instead of bytes shown as MB
  };

  LoadProgress(uint64_t total_bytes, std::string label);
  LoadProgress(uint64_t total_bytes, std::string label, const Options& options);
  ~LoadProgress();
  LoadProgress(const LoadProgress&) = delete;
  LoadProgress& operator=(const LoadProgress&) = delete;

  void Advance(uint64_t bytes);
  // Prints the final line now (if anything was shown); the destructor calls it.
  void Finish();

  uint64_t done_bytes() const { return done_; }
  bool shown() const { return shown_; }

 private:
  using Clock = std::chrono::steady_clock;
  void Draw(bool final_line);
  double Elapsed() const;

  std::mutex mu_;
  uint64_t total_ = 0, done_ = 0;
  std::string label_;
  Options opt_;
  bool tty_ = false, shown_ = false, finished_ = false;
  Clock::time_point start_, last_draw_;
};

}  // namespace vtllm::model
