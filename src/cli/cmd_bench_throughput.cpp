// vtllm bench throughput [MODEL] [--input-len N] [--output-len N] [--num-prompts N]
//   [--max-concurrency N] [--json]
// Offline throughput through the engine (as `vllm bench throughput`): N random prompts of the
// given lengths, EOS ignored, at most --max-concurrency running at once; reports requests,
// output and total tokens per second, time to first token and the engine's host time per step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "engine/engine.h"
#include "vt/error.h"

namespace vtllm::cli {

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace

void AddBenchThroughputCommand(CLI::App& bench) {
  struct Args {
    ModelArgs model;
    int64_t input_len = 128, output_len = 128, num_prompts = 16, max_concurrency = 0, long_prefill_token_threshold = 0,
            max_num_batched_tokens = 0;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = bench.add_subcommand("throughput", "Offline throughput of N requests through the engine");
  cmd->add_option("MODEL", args->model.model, "checkpoint directory");
  cmd->add_option("--input-len", args->input_len, "prompt tokens per request")->capture_default_str();
  cmd->add_option("--output-len", args->output_len, "generated tokens per request")->capture_default_str();
  cmd->add_option("--num-prompts", args->num_prompts, "requests")->capture_default_str();
  cmd->add_option("--max-concurrency", args->max_concurrency, "requests running at once (0: all)");
  cmd->add_option("--long-prefill-token-threshold", args->long_prefill_token_threshold,
                  "at most this many prompt tokens of one request per step (0: no cap)");
  cmd->add_option("--max-num-batched-tokens", args->max_num_batched_tokens,
                  "tokens per step (0: 2048, or the concurrency if larger)");
  cmd->add_flag("--json", args->json, "print one JSON object");
  AddModelFlags(cmd, args->model);
  cmd->callback([args] {
    const int64_t N = args->num_prompts, L = args->input_len, O = args->output_len;
    VT_CHECK(N >= 1 && L >= 1 && O >= 1, "bench throughput: --num-prompts, --input-len, --output-len must be >= 1");
    const int64_t C = args->max_concurrency > 0 ? std::min(args->max_concurrency, N) : N;
    engine::EngineConfig config;
    config.model_dir = ModelDir(args->model);
    config.load = LoadOptionsFor(args->model);
    config.async_scheduling = AsyncSchedulingFor(args->model);
    config.max_num_seqs = std::max<int64_t>(C, 1);
    config.max_model_len = L + O;
    VT_CHECK(args->max_num_batched_tokens >= 0, "bench throughput: --max-num-batched-tokens ",
             args->max_num_batched_tokens, " must be >= 0");
    config.max_num_batched_tokens =
        args->max_num_batched_tokens > 0 ? args->max_num_batched_tokens : std::max<int64_t>(2048, C);
    config.long_prefill_token_threshold = args->long_prefill_token_threshold;
    config.enable_prefix_caching = false;  // random prompts share nothing; keep the comparison plain
    engine::Engine eng(config);
    const int64_t V = eng.model().vocab_size();
    std::mt19937 rng(0);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
    auto make = [&](int64_t i) {
      engine::EngineRequest r;
      r.request_id = "bench-" + std::to_string(i);
      for (int64_t t = 0; t < L; ++t) r.prompt_token_ids.push_back(tok(rng));
      r.params = eng.default_params();
      r.params.temperature = 0;
      r.params.max_tokens = O;
      r.params.ignore_eos = true;
      return r;
    };
    // Warm-up: one short request through every weight.
    {
      engine::EngineRequest w = make(-1);
      w.params.max_tokens = 2;
      eng.AddRequest(w);
      while (eng.HasUnfinished()) eng.Step();
    }
    int64_t submitted = 0, done = 0, out_tokens = 0;
    std::vector<double> ttft, step_s;
    std::vector<Clock::time_point> start(static_cast<size_t>(N));
    std::vector<bool> got_first(static_cast<size_t>(N), false);
    const auto t0 = Clock::now();
    while (done < N) {
      while (submitted < N && submitted - done < C) {
        start[static_cast<size_t>(submitted)] = Clock::now();
        eng.AddRequest(make(submitted++));
      }
      const auto s0 = Clock::now();
      for (const engine::RequestOutput& o : eng.Step()) {
        const size_t i = static_cast<size_t>(std::stoll(o.request_id.substr(6)));
        for (const engine::CompletionDelta& d : o.completions) out_tokens += static_cast<int64_t>(d.token_ids.size());
        if (!got_first[i] && !o.completions.empty()) {
          got_first[i] = true;
          ttft.push_back(Since(start[i]));
        }
        if (o.finished) ++done;
      }
      step_s.push_back(Since(s0));
    }
    const double total = Since(t0);
    nlohmann::json j;
    j["model"] = config.model_dir;
    j["device"] = vt::ToString(eng.model().queue().device());
    j["num_prompts"] = N;
    j["input_len"] = L;
    j["output_len"] = O;
    j["max_concurrency"] = C;
    j["duration_s"] = total;
    j["requests_per_s"] = static_cast<double>(N) / total;
    j["output_tok_s"] = static_cast<double>(out_tokens) / total;
    j["total_tok_s"] = static_cast<double>(out_tokens + N * L) / total;
    j["ttft_median_s"] = Percentile(ttft, 0.5);
    j["ttft_p99_s"] = Percentile(ttft, 0.99);
    j["step_median_s"] = Percentile(step_s, 0.5);
    j["steps"] = step_s.size();
    const model::Model::GraphStats& gs = eng.model().graph_stats();
    j["cuda_graphs"] = {{"on", eng.model().step_graphs()}, {"recorded", gs.captures}, {"replays", gs.replays},
                        {"eager_steps", gs.eager}};
    if (args->json) {
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("%lld requests (%lld in, %lld out, %lld at once) on %s in %.2f s\n", static_cast<long long>(N),
                static_cast<long long>(L), static_cast<long long>(O), static_cast<long long>(C),
                j["device"].get<std::string>().c_str(), total);
    std::printf("throughput: %.2f requests/s, %.1f output tok/s, %.1f total tok/s\n", j["requests_per_s"].get<double>(),
                j["output_tok_s"].get<double>(), j["total_tok_s"].get<double>());
    std::printf("time to first token: median %.3f s, p99 %.3f s; step median %.2f ms over %zu steps\n",
                j["ttft_median_s"].get<double>(), j["ttft_p99_s"].get<double>(), j["step_median_s"].get<double>() * 1e3,
                step_s.size());
    if (!eng.model().queue().device().is_cpu())
      std::printf("CUDA graphs: %s (%lld recorded, %lld steps replayed, %lld eager)\n",
                  eng.model().step_graphs() ? "on" : "off", static_cast<long long>(gs.captures),
                  static_cast<long long>(gs.replays), static_cast<long long>(gs.eager));
  });
}

}  // namespace vtllm::cli
