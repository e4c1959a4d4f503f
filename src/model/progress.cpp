#include "model/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace vtllm::model {

namespace {

std::string Mb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(bytes) / 1e6);
  return buf;
}

}  // namespace

LoadProgress::LoadProgress(uint64_t total_bytes, std::string label)
    : LoadProgress(total_bytes, std::move(label), Options{}) {}

LoadProgress::LoadProgress(uint64_t total_bytes, std::string label, const Options& options)
    : total_(total_bytes), label_(std::move(label)), opt_(options) {
  if (!opt_.out) opt_.out = &std::cerr;
  tty_ = opt_.tty < 0 ? ::isatty(STDERR_FILENO) == 1 : opt_.tty == 1;
  start_ = last_draw_ = Clock::now();
}

LoadProgress::~LoadProgress() { Finish(); }

double LoadProgress::Elapsed() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

void LoadProgress::Advance(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  done_ = std::min(total_, done_ + bytes);
  const auto now = Clock::now();
  const double since_draw = std::chrono::duration<double>(now - last_draw_).count();
  if (tty_) {
    if (!shown_ || since_draw >= opt_.tty_interval_seconds || done_ == total_) Draw(false);
  } else if (Elapsed() >= opt_.quiet_seconds && (!shown_ || since_draw >= opt_.log_interval_seconds)) {
    Draw(false);
  }
}

void LoadProgress::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (shown_) Draw(true);
}

void LoadProgress::Draw(bool final_line) {
  const double pct = total_ ? 100.0 * static_cast<double>(done_) / static_cast<double>(total_) : 100.0;
  const double secs = Elapsed();
  char tail[96];
  if (opt_.unit)
    std::snprintf(tail, sizeof(tail), " %5.1f%% %llu/%llu %s %.1f s", pct, static_cast<unsigned long long>(done_),
                  static_cast<unsigned long long>(total_), opt_.unit, secs);
  else
    std::snprintf(tail, sizeof(tail), " %5.1f%% %s/%s MB %.1f s", pct, Mb(done_).c_str(), Mb(total_).c_str(), secs);
  std::ostream& out = *opt_.out;
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(pct / 100.0 * kWidth);
    out << '\r' << label_ << " [" << std::string(filled, '#') << std::string(kWidth - filled, ' ') << ']' << tail;
    if (final_line) out << '\n';
  } else {
    out << label_ << ':' << tail << (final_line ? " (done)" : "") << '\n';
  }
  out.flush();
  shown_ = true;
  last_draw_ = Clock::now();
}

}  // namespace vtllm::model
