// vtllm bench serve --base-url URL [--random-input-len 128] [--random-output-len 64]
//   [--num-prompts 100] [--max-concurrency N] [--request-rate R] [--ignore-eos] [--json]
// A serving benchmark against a running OpenAI-compatible server, as `vllm bench serve` with
// the random dataset: prompts of random token ids sent to /v1/completions as streams, at
// Poisson arrivals of rate R (default: all at once) with at most N in flight. Reports
// successful/failed requests, duration, request and token throughput, and mean / median /
// p99 of TTFT, TPOT, ITL and E2EL.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "vt/error.h"

namespace vtllm::cli {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct BenchArgs {
  std::string base_url = "http://127.0.0.1:8000";
  std::string model;
  int64_t input_len = 128, output_len = 64, num_prompts = 100, max_concurrency = 0;
  double request_rate = std::numeric_limits<double>::infinity();
  bool ignore_eos = false, json = false;
  uint64_t seed = 0;
  int64_t vocab = 0;  // 0: ask the server (/v1/models "vocab_size"), else 4096
};

struct Result {
  bool ok = false;
  std::string error;
  double ttft = 0, e2el = 0;
  std::vector<double> itl;
  int64_t output_tokens = 0, prompt_tokens = 0;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// One streaming completion; times each chunk that carries a choice.
Result RunOne(const BenchArgs& a, const std::string& model, const std::vector<int32_t>& prompt) {
  Result r;
  httplib::Client cli(a.base_url);
  cli.set_read_timeout(3600, 0);
  cli.set_connection_timeout(30, 0);
  json body = {{"model", model},     {"prompt", prompt}, {"max_tokens", a.output_len}, {"stream", true},
               {"temperature", 0.0}, {"ignore_eos", a.ignore_eos}, {"stream_options", {{"include_usage", true}}}};
  const std::string payload = body.dump();
  std::string buffer;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point last = t0;
  bool first = true, done = false;
  auto on_event = [&](const std::string& data) {
    if (data == "[DONE]") {
      done = true;
      return;
    }
    json j = json::parse(data, nullptr, false);
    if (j.is_discarded()) return;
    if (j.contains("error")) {
      r.error = j["error"].value("message", "error");
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      r.output_tokens = j["usage"].value("completion_tokens", int64_t{0});
      r.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
    }
    // Every chunk with a choice is a token event, its text empty or not, as vllm bench serve
    // counts them (a checkpoint without a tokenizer streams empty texts).
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    const Clock::time_point now = Clock::now();
    if (first) r.ttft = Seconds(now - t0);
    else r.itl.push_back(Seconds(now - last));
    first = false;
    last = now;
  };
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  req.body = payload;
  int status = 0;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buffer.append(data, len);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) on_event(event.substr(6));
      else if (status != 200 && !event.empty()) r.error = event;
    }
    return true;
  };
  auto res = cli.send(req);
  r.e2el = Seconds(Clock::now() - t0);
  if (!res) {
    r.error = "connection failed: " + httplib::to_string(res.error());
  } else if (status != 200) {
    if (r.error.empty()) r.error = "HTTP " + std::to_string(status) + " " + buffer;
  } else if (!done && r.error.empty()) {
    r.error = "stream ended without [DONE]";
  }
  r.ok = r.error.empty();
  return r;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Linear interpolation between closest ranks, as numpy.percentile.
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

void RunBench(const BenchArgs& a) {
  VT_CHECK(a.num_prompts >= 1 && a.input_len >= 1 && a.output_len >= 1,
           "bench serve: --num-prompts, --random-input-len and --random-output-len must be >= 1");
  VT_CHECK(a.request_rate > 0, "bench serve: --request-rate must be > 0 (inf: all at once)");
  httplib::Client cli(a.base_url);
  cli.set_read_timeout(60, 0);
  std::string model = a.model;
  int64_t vocab = a.vocab;
  auto models = cli.Get("/v1/models");
  VT_CHECK(models && models->status == 200, "bench serve: GET ", a.base_url, "/v1/models failed",
           models ? vt::StrCat(" (HTTP ", models->status, ")") : std::string(" (no connection)"));
  const json m = json::parse(models->body, nullptr, false);
  VT_CHECK(m.is_object() && m.contains("data") && m["data"].is_array() && !m["data"].empty(),
           "bench serve: /v1/models lists no model");
  if (model.empty()) model = m["data"][0].value("id", "");
  if (vocab == 0) vocab = m["data"][0].value("vocab_size", int64_t{4096});

  std::mt19937_64 rng(a.seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(a.num_prompts));
  for (auto& p : prompts)
    for (int64_t i = 0; i < a.input_len; ++i) p.push_back(tok(rng));
  // Arrival offsets: Poisson process of the given rate (all at 0 when infinite).
  std::vector<double> arrival(prompts.size(), 0.0);
  if (std::isfinite(a.request_rate)) {
    std::exponential_distribution<double> gap(a.request_rate);
    double t = 0;
    for (double& x : arrival) {
      x = t;
      t += gap(rng);
    }
  }
  const size_t workers = static_cast<size_t>(a.max_concurrency > 0 ? std::min<int64_t>(a.max_concurrency, a.num_prompts) : a.num_prompts);
  std::vector<Result> results(prompts.size());
  std::atomic<size_t> next{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back([&] {
      for (size_t i; (i = next++) < prompts.size();) {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival[i])));
        results[i] = RunOne(a, model, prompts[i]);
      }
    });
  for (auto& t : threads) t.join();
  const double duration = Seconds(Clock::now() - start);

  int64_t ok = 0, failed = 0, out_tokens = 0, in_tokens = 0;
  std::vector<double> ttft, tpot, itl, e2el;
  std::string first_error;
  for (const Result& r : results) {
    if (!r.ok) {
      ++failed;
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++ok;
    out_tokens += r.output_tokens;
    in_tokens += r.prompt_tokens > 0 ? r.prompt_tokens : a.input_len;
    ttft.push_back(r.ttft * 1e3);
    e2el.push_back(r.e2el * 1e3);
    if (r.output_tokens > 1) tpot.push_back((r.e2el - r.ttft) * 1e3 / static_cast<double>(r.output_tokens - 1));
    for (double x : r.itl) itl.push_back(x * 1e3);
  }
  json j;
  j["successful_requests"] = ok;
  j["failed_requests"] = failed;
  j["duration_s"] = duration;
  j["total_input_tokens"] = in_tokens;
  j["total_output_tokens"] = out_tokens;
  j["request_throughput"] = static_cast<double>(ok) / duration;
  j["output_throughput"] = static_cast<double>(out_tokens) / duration;
  j["total_token_throughput"] = static_cast<double>(in_tokens + out_tokens) / duration;
  j["max_concurrency"] = a.max_concurrency;
  j["request_rate"] = std::isfinite(a.request_rate) ? json(a.request_rate) : json("inf");
  for (auto [name, v] : {std::pair<const char*, std::vector<double>*>{"ttft", &ttft}, {"tpot", &tpot}, {"itl", &itl}, {"e2el", &e2el}}) {
    j[std::string("mean_") + name + "_ms"] = Mean(*v);
    j[std::string("median_") + name + "_ms"] = Percentile(*v, 50);
    j[std::string("p99_") + name + "_ms"] = Percentile(*v, 99);
  }
  if (!first_error.empty()) j["first_error"] = first_error;
  if (a.json) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("============ Serving Benchmark Result ============\n");
  std::printf("%-40s %d\n", "Successful requests:", static_cast<int>(ok));
  std::printf("%-40s %d\n", "Failed requests:", static_cast<int>(failed));
  if (a.max_concurrency > 0) std::printf("%-40s %d\n", "Maximum request concurrency:", static_cast<int>(a.max_concurrency));
  std::printf("%-40s %.2f\n", "Benchmark duration (s):", duration);
  std::printf("%-40s %lld\n", "Total input tokens:", static_cast<long long>(in_tokens));
  std::printf("%-40s %lld\n", "Total generated tokens:", static_cast<long long>(out_tokens));
  std::printf("%-40s %.2f\n", "Request throughput (req/s):", j["request_throughput"].get<double>());
  std::printf("%-40s %.2f\n", "Output token throughput (tok/s):", j["output_throughput"].get<double>());
  std::printf("%-40s %.2f\n", "Total token throughput (tok/s):", j["total_token_throughput"].get<double>());
  const struct {
    const char* key;
    const char* title;
  } sections[] = {{"ttft", "Time to First Token"}, {"tpot", "Time per Output Token (excl. 1st token)"},
                  {"itl", "Inter-token Latency"}, {"e2el", "End-to-end Latency"}};
  for (const auto& s : sections) {
    std::printf("%s\n", ("---------------" + std::string(s.title) + "---------------").c_str());
    const std::string k = s.key;
    std::string upper = k;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::printf("%-40s %.2f\n", ("Mean " + upper + " (ms):").c_str(), j["mean_" + k + "_ms"].get<double>());
    std::printf("%-40s %.2f\n", ("Median " + upper + " (ms):").c_str(), j["median_" + k + "_ms"].get<double>());
    std::printf("%-40s %.2f\n", ("P99 " + upper + " (ms):").c_str(), j["p99_" + k + "_ms"].get<double>());
  }
  std::printf("==================================================\n");
  if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
}

}  // namespace

void AddBenchServeCommand(CLI::App& app) {
  CLI::App* bench = app.get_subcommand("bench");
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = bench->add_subcommand("serve", "Serving benchmark against a running server (as vllm bench serve)");
  cmd->add_option("--base-url", args->base_url, "server URL")->capture_default_str();
  cmd->add_option("--model", args->model, "model name (default: the first /v1/models lists)");
  cmd->add_option("--random-input-len", args->input_len, "prompt tokens per request")->capture_default_str();
  cmd->add_option("--random-output-len", args->output_len, "max_tokens per request")->capture_default_str();
  cmd->add_option("--num-prompts", args->num_prompts, "requests to send")->capture_default_str();
  cmd->add_option("--max-concurrency", args->max_concurrency, "requests in flight at most (0: no limit)")->capture_default_str();
  cmd->add_option("--request-rate", args->request_rate, "Poisson arrival rate, requests/s (inf: all at once)");
  cmd->add_option("--seed", args->seed, "seed of the random prompts")->capture_default_str();
  cmd->add_option("--vocab-size", args->vocab, "token ids are drawn below it (0: from the server)")->capture_default_str();
  cmd->add_flag("--ignore-eos", args->ignore_eos, "generate --random-output-len tokens regardless of EOS");
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->callback([args] { RunBench(*args); });
}

}  // namespace vtllm::cli
