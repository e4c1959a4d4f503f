// LoadProgress: what it prints on a terminal, in a log, and when it stays silent. The
// clock-dependent thresholds are set to 0 or to an hour, so no outcome depends on timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "model/progress.h"

namespace vtllm::model {
namespace {

constexpr double kHour = 3600;

TEST(LoadProgress, SilentForAQuickLoadOffTerminal) {
  std::ostringstream out;
  {
    LoadProgress p(1000, "Loading weights", {&out, /*tty=*/0, /*quiet_seconds=*/kHour});
    for (int i = 0; i < 10; ++i) p.Advance(100);
    EXPECT_EQ(p.done_bytes(), 1000u);
    EXPECT_FALSE(p.shown());
  }
  EXPECT_EQ(out.str(), "");
}

TEST(LoadProgress, LogLinesForASlowLoadOffTerminal) {
  std::ostringstream out;
  {
    LoadProgress p(4'000'000, "Loading weights", {&out, 0, /*quiet_seconds=*/0, kHour, /*log_interval=*/kHour});
    p.Advance(1'000'000);  // past the (zero) quiet period: one line
    p.Advance(1'000'000);  // throttled
    p.Advance(3'000'000);  // clamped to the total, throttled
  }                        // the final line
  const std::string s = out.str();
  EXPECT_EQ(s.find('\r'), std::string::npos) << "no carriage returns in logs";
  EXPECT_NE(s.find("Loading weights:  25.0% 1.0/4.0 MB"), std::string::npos) << s;
  EXPECT_NE(s.find("100.0% 4.0/4.0 MB"), std::string::npos) << s;
  EXPECT_NE(s.find("(done)"), std::string::npos) << s;
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 2) << s;
}

TEST(LoadProgress, BarRedrawnInPlaceOnATerminal) {
  std::ostringstream out;
  {
    LoadProgress p(200, "Loading", {&out, /*tty=*/1, kHour, /*tty_interval=*/kHour, kHour});
    p.Advance(100);  // the first draw
    p.Advance(50);   // throttled
    p.Advance(50);   // complete: drawn
  }
  const std::string s = out.str();
  EXPECT_EQ(std::count(s.begin(), s.end(), '\r'), 3) << s;
  EXPECT_NE(s.find("Loading [###############               ]  50.0%"), std::string::npos) << s;
  EXPECT_NE(s.find("[##############################] 100.0%"), std::string::npos) << s;
  EXPECT_EQ(s.back(), '\n');
  EXPECT_EQ(s.find("75.0%"), std::string::npos) << "the middle update is throttled: " << s;
}

// A count of another unit (vtllm quantize's calibration tokens) is shown as is, not as MB.
TEST(LoadProgress, CountsOfAnotherUnit) {
  std::ostringstream out;
  LoadProgress::Options o{&out, 0, /*quiet_seconds=*/0, kHour, kHour};
  o.unit = "tokens";
  {
    LoadProgress p(2000, "Calibrating", o);
    p.Advance(500);
  }
  const std::string s = out.str();
  EXPECT_NE(s.find("Calibrating:  25.0% 500/2000 tokens"), std::string::npos) << s;
  EXPECT_EQ(s.find("MB"), std::string::npos) << s;
}

}  // namespace
}  // namespace vtllm::model
