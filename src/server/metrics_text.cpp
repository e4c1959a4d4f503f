#include "server/metrics_text.h"

#include <charconv>
#include <cmath>

namespace vtllm::server {

namespace {

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  std::string s(buf, p);
  // Integral values get a ".0" as prometheus_client writes them (both parse the same).
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

class Writer {
 public:
  explicit Writer(const std::string& model) : labels_("model_name=\"" + EscapeLabelValue(model) + "\"") {}

  void Header(const char* name, const char* type, const char* help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }
  void Sample(const std::string& name, const std::string& extra_labels, double v) {
    out_ += name;
    out_ += '{';
    if (!extra_labels.empty()) {
      out_ += extra_labels;
      out_ += ',';
    }
    out_ += labels_;
    out_ += "} ";
    out_ += Number(v);
    out_ += '\n';
  }
  void Gauge(const char* name, const char* help, double v) {
    Header(name, "gauge", help);
    Sample(name, "", v);
  }
  void Counter(const char* name, const char* help, double v) {
    Header(name, "counter", help);
    Sample(name, "", v);
  }
  void Histogram(const char* name, const char* help, const engine::Histogram& h) {
    Header(name, "histogram", help);
    const std::string base = name;
    uint64_t cumulative = 0;
    const std::vector<uint64_t>& counts = h.bucket_counts();
    for (size_t i = 0; i < h.bounds().size(); ++i) {
      if (i < counts.size()) cumulative += counts[i];
      Sample(base + "_bucket", "le=\"" + Number(h.bounds()[i]) + "\"", static_cast<double>(cumulative));
    }
    Sample(base + "_bucket", "le=\"+Inf\"", static_cast<double>(h.count()));
    Sample(base + "_sum", "", h.sum());
    Sample(base + "_count", "", static_cast<double>(h.count()));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string labels_;
  std::string out_;
};

}  // namespace

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string MetricsText(const engine::EngineMetrics& m, const std::string& model_name) {
  Writer w(model_name);
  w.Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
          static_cast<double>(m.num_requests_running));
  w.Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
          static_cast<double>(m.num_requests_waiting));
  w.Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", m.kv_cache_usage);
  w.Counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", static_cast<double>(m.prompt_tokens));
  w.Counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
            static_cast<double>(m.generation_tokens));
  w.Counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
            static_cast<double>(m.prefix_cache_queries));
  w.Counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
            static_cast<double>(m.prefix_cache_hits));
  w.Counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
            static_cast<double>(m.num_preemptions));
  w.Header("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  std::map<std::string, uint64_t> reasons = {{"stop", 0}, {"length", 0}, {"abort", 0}};
  for (const auto& [reason, n] : m.request_success) reasons[reason] = n;
  for (const auto& [reason, n] : reasons)
    w.Sample("vllm:request_success_total", "finished_reason=\"" + EscapeLabelValue(reason) + "\"",
             static_cast<double>(n));
  w.Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              m.time_to_first_token);
  w.Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              m.inter_token_latency);
  w.Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
              m.e2e_request_latency);
  w.Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
              m.request_queue_time);
  w.Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", m.request_prompt_tokens);
  w.Histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
              m.request_generation_tokens);
  return w.Take();
}

}  // namespace vtllm::server
