#include <gtest/gtest.h>

#include <sstream>

#include "server/metrics_text.h"

namespace vtllm::server {
namespace {

// The sample line `name{...labels...} value` whose labels contain `label`, or "" if none.
std::string Line(const std::string& text, const std::string& name, const std::string& label = "") {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + "{", 0) == 0 && line.find(label) != std::string::npos) return line;
  return "";
}

TEST(MetricsText, VllmNamesTypesAndLabels) {
  engine::EngineMetrics m;
  m.num_requests_running = 3;
  m.num_requests_waiting = 2;
  m.kv_cache_usage = 0.25;
  m.prompt_tokens = 100;
  m.generation_tokens = 40;
  m.prefix_cache_queries = 100;
  m.prefix_cache_hits = 16;
  m.num_preemptions = 1;
  m.request_success = {{"stop", 4}, {"length", 1}};
  const std::string t = MetricsText(m, "my\"model");
  EXPECT_NE(t.find("# TYPE vllm:num_requests_running gauge\n"), std::string::npos);
  EXPECT_EQ(Line(t, "vllm:num_requests_running"), "vllm:num_requests_running{model_name=\"my\\\"model\"} 3.0");
  EXPECT_EQ(Line(t, "vllm:num_requests_waiting"), "vllm:num_requests_waiting{model_name=\"my\\\"model\"} 2.0");
  EXPECT_EQ(Line(t, "vllm:kv_cache_usage_perc"), "vllm:kv_cache_usage_perc{model_name=\"my\\\"model\"} 0.25");
  for (const char* c : {"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total",
                        "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total", "vllm:request_success_total"}) {
    EXPECT_NE(t.find(std::string("# TYPE ") + c + " counter\n"), std::string::npos) << c;
    EXPECT_FALSE(Line(t, c).empty()) << c;
  }
  EXPECT_EQ(Line(t, "vllm:prompt_tokens_total"), "vllm:prompt_tokens_total{model_name=\"my\\\"model\"} 100.0");
  EXPECT_EQ(Line(t, "vllm:request_success_total", "\"stop\""),
            "vllm:request_success_total{finished_reason=\"stop\",model_name=\"my\\\"model\"} 4.0");
  EXPECT_NE(Line(t, "vllm:request_success_total", "\"abort\"").find("} 0.0"), std::string::npos);
  for (const char* h : {"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                        "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                        "vllm:request_prompt_tokens", "vllm:request_generation_tokens"})
    EXPECT_NE(t.find(std::string("# TYPE ") + h + " histogram\n"), std::string::npos) << h;
}

TEST(MetricsText, HistogramBucketsAreCumulative) {
  engine::EngineMetrics m;
  m.time_to_first_token = engine::Histogram({0.1, 1.0});
  for (double v : {0.05, 0.5, 0.7, 5.0}) m.time_to_first_token.Observe(v);
  const std::string t = MetricsText(m, "m");
  EXPECT_EQ(Line(t, "vllm:time_to_first_token_seconds_bucket", "le=\"0.1\""),
            "vllm:time_to_first_token_seconds_bucket{le=\"0.1\",model_name=\"m\"} 1.0");
  EXPECT_EQ(Line(t, "vllm:time_to_first_token_seconds_bucket", "le=\"1.0\""),
            "vllm:time_to_first_token_seconds_bucket{le=\"1.0\",model_name=\"m\"} 3.0");
  EXPECT_EQ(Line(t, "vllm:time_to_first_token_seconds_bucket", "le=\"+Inf\""),
            "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 4.0");
  EXPECT_EQ(Line(t, "vllm:time_to_first_token_seconds_count"), "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 4.0");
  EXPECT_EQ(Line(t, "vllm:time_to_first_token_seconds_sum"), "vllm:time_to_first_token_seconds_sum{model_name=\"m\"} 6.25");
}

TEST(MetricsText, EscapesLabelValues) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

}  // namespace
}  // namespace vtllm::server
