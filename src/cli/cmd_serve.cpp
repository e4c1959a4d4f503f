// vtllm serve [MODEL] [--host 127.0.0.1] [--port 8000] [--served-model-name NAME] [--api-key KEY]
//   [--max-model-len N] [--max-num-seqs N] [--max-num-batched-tokens N] [--block-size 16]
//   [--kv-cache-memory-bytes N] [--gpu-memory-utilization F] [--no-enable-prefix-caching]
//   [--scheduling-policy fcfs|priority] [--seed N] [--generation-config auto|vllm]
//   [--reasoning-parser qwen3] [--enable-auto-tool-choice --tool-call-parser hermes]
//   [--max-request-body-bytes N] [--shutdown-timeout S] [--device] [--dtype] [--threads] [--cpu-isa]
// The OpenAI-compatible server. SIGINT/SIGTERM: stop taking requests, let running ones finish
// for up to --shutdown-timeout seconds, abort the rest, exit 0.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include <pthread.h>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "engine/engine.h"
#include "server/server.h"
#include "server/serving.h"
#include "vt/error.h"

namespace vtllm::cli {

namespace {

struct ServeArgs {
  ModelArgs model;
  server::ServerOptions http;
  server::ServingOptions serving;
  int64_t max_model_len = 0, max_num_seqs = 0, max_num_batched_tokens = 0, block_size = 16;
  int64_t long_prefill_token_threshold = 0;
  int64_t kv_cache_memory_bytes = 0;
  double gpu_memory_utilization = 0.9;
  bool no_prefix_caching = false, prefix_caching = false;
  std::string scheduling_policy = "fcfs";
  uint64_t seed = 0;
  std::string generation_config = "auto";
  double shutdown_timeout_s = 30;
};

engine::EngineConfig MakeEngineConfig(const ServeArgs& a) {
  VT_CHECK(a.scheduling_policy == "fcfs" || a.scheduling_policy == "priority",
           "--scheduling-policy: \"", a.scheduling_policy, "\" is not fcfs or priority");
  VT_CHECK(a.generation_config == "auto" || a.generation_config == "vllm",
           "--generation-config: \"", a.generation_config, "\" is not auto or vllm");
  VT_CHECK(a.block_size >= 1, "--block-size must be >= 1");
  VT_CHECK(a.gpu_memory_utilization > 0 && a.gpu_memory_utilization <= 1, "--gpu-memory-utilization must be in (0, 1]");
  engine::EngineConfig c;
  c.model_dir = ModelDir(a.model);
  c.load = LoadOptionsFor(a.model);
  c.async_scheduling = AsyncSchedulingFor(a.model);
  c.max_model_len = a.max_model_len;
  c.max_num_seqs = a.max_num_seqs;
  c.max_num_batched_tokens = a.max_num_batched_tokens;
  c.long_prefill_token_threshold = a.long_prefill_token_threshold;
  c.block_size = a.block_size;
  c.kv_cache_memory_bytes = a.kv_cache_memory_bytes;
  c.gpu_memory_utilization = a.gpu_memory_utilization;
  c.enable_prefix_caching = !a.no_prefix_caching;
  c.scheduling_policy = a.scheduling_policy == "priority" ? engine::SchedulingPolicy::kPriority : engine::SchedulingPolicy::kFcfs;
  c.seed = a.seed;
  c.use_generation_config = a.generation_config == "auto";
  return c;
}

void Serve(const ServeArgs& args) {
  // SIGINT/SIGTERM are taken by one watcher thread; blocked here before any other thread
  // starts, so every thread inherits the mask and none is interrupted.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const engine::EngineConfig config = MakeEngineConfig(args);
  engine::AsyncEngine engine(config);
  server::ServingOptions serving_options = args.serving;
  // The embedded model's folder is named by a content hash; clients get a stable name.
  if (args.model.model.empty() && serving_options.served_model_names.empty())
    serving_options.served_model_names.push_back("vtllm-default");
  server::Serving serving(engine, serving_options);
  server::HttpServer http(serving, args.http);
  const int port = http.Bind();
  std::fprintf(stderr, "vtllm serve: model %s on http://%s:%d (max_model_len %lld)\n", serving.model_name().c_str(),
               args.http.host.c_str(), port, static_cast<long long>(engine.engine().max_model_len()));

  std::atomic<bool> done{false};
  std::thread watcher([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    while (!done) {
      const int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig != SIGINT && sig != SIGTERM) continue;
      std::fprintf(stderr, "vtllm serve: %s, shutting down (up to %.0f s for running requests)\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM", args.shutdown_timeout_s);
      http.Drain();
      engine.Shutdown(std::chrono::milliseconds(static_cast<int64_t>(args.shutdown_timeout_s * 1000)));
      http.WaitIdle(std::chrono::seconds(5));
      http.Stop();
      return;
    }
  });
  http.Run();
  done = true;
  watcher.join();
  std::fprintf(stderr, "vtllm serve: stopped\n");
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  cmd->add_option("MODEL", args->model.model, "checkpoint directory (default: the embedded default model)");
  cmd->add_option("--host", args->http.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", args->http.port, "port (0: any free one)")->capture_default_str();
  cmd->add_option("--served-model-name", args->serving.served_model_names,
                  "name(s) clients use for the model (default: the model directory's name)");
  cmd->add_option("--api-key", args->http.api_key, "require 'Authorization: Bearer KEY' on /v1 routes");
  cmd->add_option("--max-model-len", args->max_model_len, "context length (0: the model's)")->capture_default_str();
  cmd->add_option("--max-num-seqs", args->max_num_seqs, "requests per step (0: 256 on CUDA, 64 on CPU)")->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", args->max_num_batched_tokens, "tokens per step (0: the default)")->capture_default_str();
  cmd->add_option("--long-prefill-token-threshold", args->long_prefill_token_threshold,
                  "at most this many prompt tokens of one request per step (0: no cap)")
      ->capture_default_str();
  cmd->add_option("--block-size", args->block_size, "tokens per KV-cache block")->capture_default_str();
  cmd->add_option("--kv-cache-memory-bytes", args->kv_cache_memory_bytes, "KV-cache size (0: chosen at start-up)")->capture_default_str();
  cmd->add_option("--gpu-memory-utilization", args->gpu_memory_utilization, "fraction of GPU memory to use")->capture_default_str();
  cmd->add_flag("--no-enable-prefix-caching", args->no_prefix_caching, "turn the prefix cache off");
  cmd->add_flag("--enable-prefix-caching", args->prefix_caching, "keep the prefix cache on (the default)");
  cmd->add_option("--scheduling-policy", args->scheduling_policy, "fcfs or priority")->capture_default_str();
  cmd->add_option("--seed", args->seed, "seed of requests without their own")->capture_default_str();
  cmd->add_option("--generation-config", args->generation_config,
                  "auto: sampling defaults from generation_config.json; vllm: vLLM's neutral defaults")
      ->capture_default_str();
  cmd->add_option("--reasoning-parser", args->serving.reasoning_parser, "qwen3: <think> blocks -> the message's reasoning");
  cmd->add_flag("--enable-auto-tool-choice", args->serving.enable_auto_tool_choice, "let the model call tools (tool_choice auto)");
  cmd->add_option("--tool-call-parser", args->serving.tool_call_parser, "hermes: <tool_call> blocks -> tool_calls");
  cmd->add_option("--max-request-body-bytes", args->http.max_request_body_bytes, "larger bodies get 413")->capture_default_str();
  cmd->add_option("--shutdown-timeout", args->shutdown_timeout_s, "seconds running requests get on SIGINT/SIGTERM")->capture_default_str();
  cmd->add_option("--http-threads", args->http.http_threads,
                  "connections served at once (each streaming client holds one)")
      ->capture_default_str();
  AddModelFlags(cmd, args->model);
  cmd->callback([args] { Serve(*args); });
}

}  // namespace vtllm::cli
