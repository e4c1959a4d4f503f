// vtllm bench latency [MODEL] [--input-len 128] [--output-len 64] [--batch-size 1]
//   [--device cpu|cuda] [--json]
// Prefill and decode speed of B random prompts, and the memory bandwidth the decode steps
// use (weight and KV-cache bytes read per step / step time) as a fraction of the bandwidth
// measured on the same device in the same run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_options.h"
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

}  // namespace

void AddBenchCommand(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  AddBenchThroughputCommand(*bench);
  struct Args {
    ModelArgs model;
    int64_t input_len = 128, output_len = 64, batch = 1;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = bench->add_subcommand("latency", "Prefill and decode speed at a fixed batch");
  cmd->add_option("MODEL", args->model.model, "checkpoint directory");
  cmd->add_option("--input-len", args->input_len, "prompt tokens per sequence")->capture_default_str();
  cmd->add_option("--output-len", args->output_len, "decode steps")->capture_default_str();
  cmd->add_option("--batch-size", args->batch, "sequences decoded together")->capture_default_str();
  cmd->add_flag("--json", args->json, "print one JSON object");
  AddModelFlags(cmd, args->model);
  cmd->callback([args] {
    const int64_t B = args->batch, L = args->input_len, O = args->output_len;
    VT_CHECK(B >= 1 && L >= 1 && O >= 1, "bench latency: --batch-size, --input-len and --output-len must be >= 1");
    auto model = LoadModel(args->model);
    const int64_t V = model->vocab_size();
    VT_CHECK(L + O <= model->config().max_position_embeddings, "bench latency: input + output length ", L + O,
             " exceeds the model's context ", model->config().max_position_embeddings);
    // Every sequence holds whole blocks: B sequences of L + O tokens, plus the warm-up's.
    constexpr int64_t kBlock = 16;
    model::KvCache cache = model->MakeKvCache(B * ((L + O + kBlock - 1) / kBlock * kBlock) + kBlock, kBlock);
    std::mt19937 rng(0);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));

    // Warm-up: one token through every weight (first touches of the mapped checkpoint).
    {
      model::SequenceKv warm;
      model->Forward(std::vector<int32_t>{tok(rng)}, std::vector<int64_t>{0}, {&cache, &warm});
      cache.Release(warm);
    }
    std::vector<model::SequenceKv> seqs(static_cast<size_t>(B));
    std::vector<int32_t> ids;
    std::vector<model::BatchEntry> batch;
    for (auto& s : seqs) {
      for (int64_t i = 0; i < L; ++i) ids.push_back(tok(rng));
      batch.push_back({&s, L});
    }
    const auto t0 = Clock::now();
    std::vector<float> logits = model->ForwardBatch(cache, ids, batch);
    const double prefill_s = Seconds(t0, Clock::now());

    std::vector<double> steps;
    for (auto& e : batch) e.num_new = 1;
    std::vector<double> issue;  // host time to issue each step's work
    for (int64_t step = 0; step < O; ++step) {
      ids.clear();
      for (int64_t b = 0; b < B; ++b) {
        const float* row = logits.data() + b * V;
        ids.push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
      }
      const auto s0 = Clock::now();
      logits = model->ForwardBatch(cache, ids, batch);
      steps.push_back(Seconds(s0, Clock::now()));
      issue.push_back(model->last_issue_seconds());
    }
    double decode_s = 0;
    for (double s : steps) decode_s += s;
    const double step_s = Median(steps), issue_s = Median(issue);
    const double bandwidth = MeasureBandwidth(model->queue());

    const model::KvCacheSpec& kv = cache.spec();
    const double kv_bytes_per_token = 2.0 * static_cast<double>(kv.num_layers * kv.num_kv_heads * kv.head_dim) *
                                      static_cast<double>(vt::DTypeSize(kv.dtype));
    const double weight_bytes = static_cast<double>(model->weight_bytes());
    // A decode step reads every weight once plus each sequence's cached keys and values (at
    // the median step the context is about L + O/2).
    const double kv_bytes_per_step = static_cast<double>(B) * (static_cast<double>(L) + O / 2.0) * kv_bytes_per_token;
    const double achieved = (weight_bytes + kv_bytes_per_step) / step_s / 1e9;

    nlohmann::json j;
    j["model"] = args->model.model;
    j["device"] = vt::ToString(model->queue().device());
    j["dtype"] = std::string(vt::DTypeName(model->dtype()));
    j["quantization"] = model->quant().method == model::QuantMethod::kFp8Static ? "fp8-static" : "none";
    j["threads"] = model->queue().device().is_cpu() ? model->queue().num_threads() : 0;
    if (model->queue().device().is_cpu()) j["cpu_isa"] = vt::CpuIsaName(model->queue().cpu_isa());
    j["batch_size"] = B;
    j["input_len"] = L;
    j["output_len"] = O;
    j["prefill_s"] = prefill_s;
    j["prefill_tok_s"] = static_cast<double>(B * L) / prefill_s;
    j["decode_step_median_s"] = step_s;
    j["decode_tok_s"] = static_cast<double>(B * O) / decode_s;
    j["decode_tok_s_at_median_step"] = static_cast<double>(B) / step_s;
    j["decode_issue_median_s"] = issue_s;
    j["weight_bytes_per_step"] = weight_bytes;
    j["weight_bytes_per_token"] = weight_bytes / static_cast<double>(B);
    j["kv_bytes_per_step"] = kv_bytes_per_step;
    j["achieved_gb_s"] = achieved;
    j["measured_bandwidth_gb_s"] = bandwidth;
    j["bandwidth_fraction"] = achieved / bandwidth;
    if (args->json) {
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("model %s on %s%s, %s activations, %s weights, batch %lld\n", args->model.model.c_str(),
                j["device"].get<std::string>().c_str(),
                j.contains("cpu_isa") ? vt::StrCat(" (", j["cpu_isa"].get<std::string>(), " kernels)").c_str() : "",
                j["dtype"].get<std::string>().c_str(), j["quantization"].get<std::string>().c_str(),
                static_cast<long long>(B));
    std::printf("prefill: %lld tokens in %.3f s = %.1f tok/s\n", static_cast<long long>(B * L), prefill_s,
                j["prefill_tok_s"].get<double>());
    std::printf("decode:  %lld steps, median %.2f ms/step = %.2f tok/s (mean %.2f tok/s)\n",
                static_cast<long long>(O), step_s * 1e3, static_cast<double>(B) / step_s,
                j["decode_tok_s"].get<double>());
    if (!model->queue().device().is_cpu())  // (CPU kernels run while they are issued)
      std::printf("host:    %.2f ms/step to issue the step's work (%.0f%% of the step; near 100%%: host-bound)\n",
                  issue_s * 1e3, 100.0 * issue_s / step_s);
    std::printf("bytes per step: weights %.1f MB, KV cache %.1f MB; per token %.1f MB of weights\n",
                weight_bytes / 1e6, kv_bytes_per_step / 1e6, weight_bytes / static_cast<double>(B) / 1e6);
    std::printf("bandwidth: %.1f GB/s used of %.1f GB/s measured (%.0f%%)\n", achieved, bandwidth,
                100.0 * achieved / bandwidth);
  });
}

}  // namespace vtllm::cli
