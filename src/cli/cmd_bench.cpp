// vtllm bench latency [MODEL] [--input-len 128] [--output-len 64] [--batch-size 1] [--rounds 2]
//   [--device cpu|cuda] [--json]
// Prefill and decode speed of B random prompts through the engine (as `vllm bench latency`:
// one batch of requests, greedy, EOS ignored), beside the same batch run as bare model steps
// (Model::ForwardBatch: no scheduler, no sampler, the argmax on the host) in the same process,
// rounds alternated; and the memory bandwidth the decode steps use (weight and KV-cache bytes
// read per step / step time) as a fraction of the bandwidth measured on the same device in
// the same run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "engine/engine.h"
#include "vt/error.h"

namespace vtllm::cli {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Best-of-5 read bandwidth in GB/s. CPU: every thread of the model's queue sums its share of
// a 1 GiB buffer (far larger than any cache), once as one plain stream and once as 4
// streams prefetched 1536 bytes ahead, as the decode kernels read their weights; the best
// of both (on this project's 2-core EPYC VM the kernels' pattern reads faster, and the
// plain figure alone put batch-1 decode at 108-112% of it). CUDA: a device-to-device copy
// of 1 GiB, counting the bytes read and written.
double MeasureBandwidth(const vt::Queue& q) {
  constexpr int64_t kBytes = int64_t{1} << 30;
  constexpr int64_t kPrefetch = 1536 / 8;  // elements
  double best = 0;
  if (q.device().is_cpu()) {
    const int64_t n = kBytes / 8;
    vt::Tensor buf = vt::Tensor::Empty({n}, vt::DType::kI64, vt::Device::Cpu());
    auto* p = buf.data_as<uint64_t>();
    q.ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = static_cast<uint64_t>(i);
    });
    std::vector<uint64_t> sums(4096, 0);
    for (const int streams : {1, 4}) {
      for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = Clock::now();
        q.ParallelFor(n, 1 << 16, [&](int64_t b, int64_t e) {
          uint64_t s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          const int64_t part = (e - b) / streams / 8 * 8;
          for (int64_t i = 0; i < part; i += 8)
            for (int st = 0; st < streams; ++st) {
              const uint64_t* x = p + b + st * part + i;
              if (streams > 1) __builtin_prefetch(x + kPrefetch);
              for (int j = 0; j < 8; ++j) s[j] += x[j];
            }
          for (int64_t i = b + streams * part; i < e; ++i) s[0] += p[i];
          sums[static_cast<size_t>(b / (1 << 16)) % sums.size()] +=
              s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
        });
        best = std::max(best, static_cast<double>(kBytes) / Seconds(t0, Clock::now()) / 1e9);
      }
    }
    volatile uint64_t sink = 0;
    for (uint64_t s : sums) sink = sink + s;
  } else {
    vt::Tensor a = vt::Tensor::Empty({kBytes}, vt::DType::kU8, q.device());
    vt::Tensor b = vt::Tensor::Empty({kBytes}, vt::DType::kU8, q.device());
    for (int rep = 0; rep < 5; ++rep) {
      q.Synchronize();
      const auto t0 = Clock::now();
      b.CopyFrom(a);
      q.Synchronize();
      best = std::max(best, 2.0 * static_cast<double>(kBytes) / Seconds(t0, Clock::now()) / 1e9);
    }
  }
  return best;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One round's figures for one way of running the batch.
struct RoundResult {
  double prefill_s = 0;      // the step(s) that computed the prompts (and drew each first token)
  double step_median_s = 0;  // median decode step
  double decode_s = 0;       // all decode steps
  double issue_median_s = 0; // host time to issue a decode step's work
  int64_t decode_steps = 0;
};

// The batch as bare model steps on a cache of its own.
RoundResult RunModelOnly(model::Model& model, model::KvCache& cache, int64_t B, int64_t L, int64_t O, uint32_t seed) {
  const int64_t V = model.vocab_size();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
  std::vector<model::SequenceKv> seqs(static_cast<size_t>(B));
  std::vector<int32_t> ids;
  std::vector<model::BatchEntry> batch;
  for (auto& s : seqs) {
    for (int64_t i = 0; i < L; ++i) ids.push_back(tok(rng));
    batch.push_back({&s, L});
  }
  RoundResult r;
  const auto t0 = Clock::now();
  std::vector<float> logits = model.ForwardBatch(cache, ids, batch);
  r.prefill_s = Seconds(t0, Clock::now());
  std::vector<double> steps, issue;
  for (auto& e : batch) e.num_new = 1;
  for (int64_t step = 1; step < O; ++step) {  // the prefill drew the first token, as the engine's does
    ids.clear();
    for (int64_t b = 0; b < B; ++b) {
      const float* row = logits.data() + b * V;
      ids.push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
    }
    const auto s0 = Clock::now();
    logits = model.ForwardBatch(cache, ids, batch);
    steps.push_back(Seconds(s0, Clock::now()));
    issue.push_back(model.last_issue_seconds());
  }
  for (auto& s : seqs) cache.Release(s);
  for (double s : steps) r.decode_s += s;
  r.step_median_s = Median(steps);
  r.issue_median_s = Median(issue);
  r.decode_steps = static_cast<int64_t>(steps.size());
  return r;
}

// How the engine's requests draw their tokens: greedy by default; --temperature, --top-p
// and --top-k measure a sampled step (the sampler's kernels included).
struct DrawParams {
  double temperature = 0, top_p = 1;
  int64_t top_k = 0;
};

// The batch as B requests through the engine: the first step computes every prompt (the
// token budget holds them all) and draws each request's first token; each later step decodes
// one token for all B.
RoundResult RunEngine(engine::Engine& eng, const model::Model& model, int64_t B, int64_t L, int64_t O,
                      uint32_t seed, int round, const DrawParams& draw) {
  const int64_t V = model.vocab_size();
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
  for (int64_t b = 0; b < B; ++b) {
    engine::EngineRequest r;
    r.request_id = "latency-" + std::to_string(round);
    r.request_id.append("-").append(std::to_string(b));
    for (int64_t i = 0; i < L; ++i) r.prompt_token_ids.push_back(tok(rng));
    r.params = eng.default_params();
    r.params.temperature = draw.temperature;
    r.params.top_p = draw.top_p;
    r.params.top_k = static_cast<int>(draw.top_k);
    r.params.seed = seed * 1000 + static_cast<uint64_t>(b);
    r.params.max_tokens = O;
    r.params.ignore_eos = true;
    eng.AddRequest(std::move(r));
  }
  RoundResult r;
  int64_t with_first = 0;
  std::vector<double> steps, issue;
  std::vector<bool> seen(static_cast<size_t>(B), false);
  const auto t0 = Clock::now();
  while (eng.HasUnfinished()) {
    const auto s0 = Clock::now();
    const std::vector<engine::RequestOutput> outs = eng.Step();
    const double s = Seconds(s0, Clock::now());
    if (with_first < B) {
      for (const engine::RequestOutput& o : outs) {
        const size_t b = static_cast<size_t>(std::stoll(o.request_id.substr(o.request_id.rfind('-') + 1)));
        if (!seen[b] && !o.completions.empty() && !o.completions[0].token_ids.empty()) {
          seen[b] = true;
          ++with_first;
        }
      }
      if (with_first == B) r.prefill_s = Seconds(t0, Clock::now());
      continue;
    }
    if (outs.empty()) continue;  // a step that decoded nothing (none is expected here)
    steps.push_back(s);
    issue.push_back(model.last_issue_seconds());
  }
  for (double s : steps) r.decode_s += s;
  r.step_median_s = Median(steps);
  r.issue_median_s = Median(issue);
  r.decode_steps = static_cast<int64_t>(steps.size());
  return r;
}

nlohmann::json RoundJson(const RoundResult& r, int64_t B, int64_t L) {
  nlohmann::json j;
  j["prefill_s"] = r.prefill_s;
  j["prefill_tok_s"] = static_cast<double>(B * L) / r.prefill_s;
  j["decode_steps"] = r.decode_steps;
  j["decode_step_median_s"] = r.step_median_s;
  j["decode_tok_s"] = r.decode_s > 0 ? static_cast<double>(B * r.decode_steps) / r.decode_s : 0.0;
  j["decode_tok_s_at_median_step"] = r.step_median_s > 0 ? static_cast<double>(B) / r.step_median_s : 0.0;
  j["decode_issue_median_s"] = r.issue_median_s;
  return j;
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  AddBenchThroughputCommand(*bench);
  struct Args {
    ModelArgs model;
    int64_t input_len = 128, output_len = 64, batch = 1, max_model_len = 0;
    int rounds = 2;
    bool json = false;
    DrawParams draw;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = bench->add_subcommand("latency", "Prefill and decode speed of one batch through the engine, beside bare model steps");
  cmd->add_option("MODEL", args->model.model, "checkpoint directory");
  cmd->add_option("--input-len", args->input_len, "prompt tokens per sequence")->capture_default_str();
  cmd->add_option("--output-len", args->output_len, "tokens generated per sequence")->capture_default_str();
  cmd->add_option("--batch-size", args->batch, "sequences decoded together")->capture_default_str();
  cmd->add_option("--max-model-len", args->max_model_len,
                  "the engine's context limit (0: input + output); a server's is the model's, and the block "
                  "tables its CUDA graphs record are that wide")
      ->capture_default_str();
  cmd->add_option("--rounds", args->rounds, "rounds of (model steps, engine), alternated; medians reported")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->add_option("--temperature", args->draw.temperature, "the engine's requests: 0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", args->draw.top_p, "the engine's requests' top_p")->capture_default_str();
  cmd->add_option("--top-k", args->draw.top_k, "the engine's requests' top_k (0: off)")->capture_default_str();
  AddModelFlags(cmd, args->model);
  cmd->callback([args] {
    const int64_t B = args->batch, L = args->input_len, O = args->output_len;
    VT_CHECK(B >= 1 && L >= 1 && O >= 2, "bench latency: --batch-size and --input-len must be >= 1 and --output-len >= 2");
    VT_CHECK(args->rounds >= 1, "bench latency: --rounds must be >= 1, not ", args->rounds);
    std::shared_ptr<model::Model> model = LoadModel(args->model);
    const int64_t V = model->vocab_size();
    VT_CHECK(L + O <= model->config().max_position_embeddings, "bench latency: input + output length ", L + O,
             " exceeds the model's context ", model->config().max_position_embeddings);
    const int64_t max_model_len = args->max_model_len > 0 ? args->max_model_len : L + O;
    VT_CHECK(max_model_len >= L + O && max_model_len <= model->config().max_position_embeddings,
             "bench latency: --max-model-len ", max_model_len, " must hold input + output (", L + O,
             ") and fit the model's context (", model->config().max_position_embeddings, ")");
    // The bare steps' cache: every sequence holds whole blocks, plus the warm-up's block. Made
    // before the engine sizes its own from what memory is left.
    constexpr int64_t kBlock = 16;
    model::KvCache cache = model->MakeKvCache(B * ((L + O + kBlock - 1) / kBlock * kBlock) + kBlock, kBlock, B);
    {  // Warm-up: one token through every weight (first touches of the mapped checkpoint).
      std::mt19937 rng(0);
      model::SequenceKv warm;
      model->Forward(std::vector<int32_t>{static_cast<int32_t>(rng() % static_cast<uint32_t>(V))},
                     std::vector<int64_t>{0}, {&cache, &warm});
      cache.Release(warm);
    }
    engine::EngineConfig config;
    config.model_dir = ModelDir(args->model);
    config.load = LoadOptionsFor(args->model, false);
    config.async_scheduling = AsyncSchedulingFor(args->model);
    config.max_num_seqs = B;
    config.max_model_len = max_model_len;
    config.max_num_batched_tokens = std::max<int64_t>(B * L, B);
    config.enable_prefix_caching = false;  // random prompts; and each round's prompts are new
    engine::Engine eng(config, model, std::nullopt);
    {  // The engine's warm-up: one short request (its step buffers and the sampler).
      engine::EngineRequest w;
      w.request_id = "warm-up";
      w.prompt_token_ids = {0, 1};
      w.params = eng.default_params();
      w.params.max_tokens = 2;
      w.params.ignore_eos = true;
      eng.AddRequest(std::move(w));
      while (eng.HasUnfinished()) eng.Step();
    }
    std::vector<RoundResult> bare, through;
    for (int round = 0; round < args->rounds; ++round) {
      const uint32_t seed = static_cast<uint32_t>(round + 1);
      bare.push_back(RunModelOnly(*model, cache, B, L, O, seed));
      through.push_back(RunEngine(eng, *model, B, L, O, seed, round, args->draw));
    }
    VT_CHECK(eng.num_free_blocks() == eng.num_total_blocks(), "bench latency: the engine kept ",
             eng.num_total_blocks() - eng.num_free_blocks(), " KV blocks after its requests ended");
    auto median_of = [](const std::vector<RoundResult>& v, double RoundResult::*f) {
      std::vector<double> x;
      for (const RoundResult& r : v) x.push_back(r.*f);
      return Median(x);
    };
    RoundResult eng_med, bare_med;
    for (auto [dst, src] : {std::pair{&eng_med, &through}, std::pair{&bare_med, &bare}}) {
      dst->prefill_s = median_of(*src, &RoundResult::prefill_s);
      dst->step_median_s = median_of(*src, &RoundResult::step_median_s);
      dst->decode_s = median_of(*src, &RoundResult::decode_s);
      dst->issue_median_s = median_of(*src, &RoundResult::issue_median_s);
      dst->decode_steps = src->front().decode_steps;
    }
    const double bandwidth = MeasureBandwidth(model->queue());

    const model::KvCacheSpec& kv = cache.spec();
    const double kv_bytes_per_token = 2.0 * static_cast<double>(kv.num_layers * kv.num_kv_heads * kv.head_dim) *
                                      static_cast<double>(vt::DTypeSize(kv.dtype));
    const double weight_bytes = static_cast<double>(model->weight_bytes());
    // A decode step reads every weight once plus each sequence's cached keys and values (at
    // the median step the context is about L + O/2).
    const double kv_bytes_per_step = static_cast<double>(B) * (static_cast<double>(L) + O / 2.0) * kv_bytes_per_token;
    auto achieved = [&](double step_s) { return (weight_bytes + kv_bytes_per_step) / step_s / 1e9; };

    // The headline (top-level) figures are the engine's; "model_only" holds the bare steps'.
    nlohmann::json j = RoundJson(eng_med, B, L);
    j["model"] = config.model_dir;
    j["device"] = vt::ToString(model->queue().device());
    j["dtype"] = std::string(vt::DTypeName(model->dtype()));
    j["kv_cache_dtype"] = std::string(vt::DTypeName(model->kv_cache_dtype()));
    const model::QuantMethod qm = model->quant().method;
    j["quantization"] = qm == model::QuantMethod::kFp8Static      ? "fp8-static"
                        : qm == model::QuantMethod::kFp8Block      ? "fp8-block"
                        : qm == model::QuantMethod::kFp8ChannelToken ? "fp8-channel-token"
                        : qm == model::QuantMethod::kFp8Online      ? "fp8-online"
                                                                   : "none";
    j["threads"] = model->queue().device().is_cpu() ? model->queue().num_threads() : 0;
    if (model->queue().device().is_cpu()) j["cpu_isa"] = vt::CpuIsaName(model->queue().cpu_isa());
    j["batch_size"] = B;
    j["sampling"] = {{"temperature", args->draw.temperature}, {"top_p", args->draw.top_p}, {"top_k", args->draw.top_k}};
    j["input_len"] = L;
    j["output_len"] = O;
    j["rounds"] = args->rounds;
    j["model_only"] = RoundJson(bare_med, B, L);
    j["engine_step_over_model_step"] = eng_med.step_median_s / bare_med.step_median_s;
    for (size_t r = 0; r < through.size(); ++r) {
      j["per_round"].push_back({{"engine", RoundJson(through[r], B, L)}, {"model_only", RoundJson(bare[r], B, L)}});
    }
    const model::Model::GraphStats& gs = model->graph_stats();
    j["cuda_graphs"] = {{"on", model->step_graphs()}, {"recorded", gs.captures}, {"replays", gs.replays},
                        {"eager_steps", gs.eager}};
    const engine::EngineMetrics em = eng.metrics();
    j["async_scheduling"] = {{"on", eng.config().async_scheduling.value_or(false)},
                             {"steps_launched_ahead", em.steps_launched_ahead}, {"steps", em.steps}};
    j["weight_bytes_per_step"] = weight_bytes;
    j["weight_bytes_per_token"] = weight_bytes / static_cast<double>(B);
    j["kv_bytes_per_step"] = kv_bytes_per_step;
    j["achieved_gb_s"] = achieved(eng_med.step_median_s);
    j["model_only"]["achieved_gb_s"] = achieved(bare_med.step_median_s);
    j["measured_bandwidth_gb_s"] = bandwidth;
    j["bandwidth_fraction"] = achieved(eng_med.step_median_s) / bandwidth;
    j["model_only"]["bandwidth_fraction"] = achieved(bare_med.step_median_s) / bandwidth;
    if (args->json) {
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("model %s on %s%s, %s activations, %s weights, batch %lld, medians of %d rounds\n",
                config.model_dir.c_str(), j["device"].get<std::string>().c_str(),
                j.contains("cpu_isa") ? vt::StrCat(" (", j["cpu_isa"].get<std::string>(), " kernels)").c_str() : "",
                j["dtype"].get<std::string>().c_str(), j["quantization"].get<std::string>().c_str(),
                static_cast<long long>(B), args->rounds);
    const bool cuda = !model->queue().device().is_cpu();
    for (auto [name, r] : {std::pair{"engine", &eng_med}, std::pair{"model steps", &bare_med}}) {
      std::printf("%s:\n", name);
      std::printf("  prefill: %lld tokens in %.3f s = %.1f tok/s\n", static_cast<long long>(B * L), r->prefill_s,
                  static_cast<double>(B * L) / r->prefill_s);
      std::printf("  decode:  %lld steps, median %.2f ms/step = %.2f tok/s\n", static_cast<long long>(r->decode_steps),
                  r->step_median_s * 1e3, static_cast<double>(B) / r->step_median_s);
      if (cuda)  // (CPU kernels run while they are issued)
        std::printf("  host:    %.2f ms/step to issue the model's work (%.0f%% of the step; near 100%%: host-bound)\n",
                    r->issue_median_s * 1e3, 100.0 * r->issue_median_s / r->step_median_s);
      std::printf("  bandwidth: %.1f GB/s used of %.1f GB/s measured (%.0f%%)\n", achieved(r->step_median_s),
                  bandwidth, 100.0 * achieved(r->step_median_s) / bandwidth);
    }
    std::printf("engine decode step / model step: %.3f\n", eng_med.step_median_s / bare_med.step_median_s);
    if (cuda)
      std::printf("CUDA graphs: %s (%lld recorded, %lld steps replayed, %lld eager)\n",
                  model->step_graphs() ? "on" : "off", static_cast<long long>(gs.captures),
                  static_cast<long long>(gs.replays), static_cast<long long>(gs.eager));
    std::printf("async scheduling: %s (%llu of the engine's %llu steps launched ahead)\n",
                eng.config().async_scheduling.value_or(false) ? "on" : "off",
                static_cast<unsigned long long>(em.steps_launched_ahead), static_cast<unsigned long long>(em.steps));
    std::printf("bytes per step: weights %.1f MB, KV cache %.1f MB; per token %.1f MB of weights\n",
                weight_bytes / 1e6, kv_bytes_per_step / 1e6, weight_bytes / static_cast<double>(B) / 1e6);
  });
}

}  // namespace vtllm::cli
