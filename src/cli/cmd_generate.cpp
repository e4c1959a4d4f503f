// vtllm generate [MODEL] (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N]
//   [--temperature T] [--top-p P] [--top-k K] [--seed N] [--json] [--device] [--dtype]
// One sequence: prefill the prompt, then decode token by token over the paged KV cache until
// --max-tokens or an end-of-sequence token. Sampling defaults come from generation_config.json
// (as vLLM reads it); --temperature 0 is greedy.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"
#include "vt/error.h"

namespace vtllm::cli {

namespace {

struct SamplingParams {
  double temperature = 1.0, top_p = 1.0;
  int64_t top_k = 0;  // 0: all
};

// Picks the next token from one row of logits: argmax when temperature is 0, otherwise
// softmax(logits / T) restricted to the top-k, then to the smallest top-p mass, then sampled.
int32_t SampleToken(const std::vector<float>& logits, const SamplingParams& p, std::mt19937_64& rng) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (p.temperature <= 0.0)
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = p.top_k > 0 ? std::min(p.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  order.resize(static_cast<size_t>(k));
  const double mx = logits[order[0]];
  std::vector<double> probs(order.size());
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) sum += probs[i] = std::exp((logits[order[i]] - mx) / p.temperature);
  size_t keep = order.size();
  if (p.top_p < 1.0) {
    double acc = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      acc += probs[i] / sum;
      if (acc >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::discrete_distribution<size_t> dist(probs.begin(), probs.begin() + static_cast<std::ptrdiff_t>(keep));
  return order[dist(rng)];
}

}  // namespace

void AddGenerateCommand(CLI::App& app) {
  struct Args {
    ModelArgs model;
    std::string prompt, prompt_ids;
    int64_t max_tokens = 16;
    std::optional<double> temperature, top_p;
    std::optional<int64_t> top_k;
    std::optional<uint64_t> seed;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a continuation of one prompt");
  cmd->add_option("MODEL", args->model.model, "checkpoint directory");
  auto* text = cmd->add_option("--prompt", args->prompt, "prompt text (needs MODEL/tokenizer.json)");
  auto* ids = cmd->add_option("--prompt-ids", args->prompt_ids, "comma-separated prompt token ids");
  text->excludes(ids);
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate at most")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0 = greedy (default: generation_config.json)");
  cmd->add_option("--top-p", args->top_p, "nucleus sampling mass (default: generation_config.json)");
  cmd->add_option("--top-k", args->top_k, "sample among the k most likely (0 = all)");
  cmd->add_option("--seed", args->seed, "sampling seed");
  cmd->add_flag("--json", args->json, "print {\"token_ids\":[...],\"text\":\"...\"}");
  AddModelFlags(cmd, args->model);
  cmd->callback([args] {
    VT_CHECK(!args->prompt.empty() || !args->prompt_ids.empty(), "generate: give --prompt TEXT or --prompt-ids");
    VT_CHECK(args->max_tokens >= 1, "generate: --max-tokens must be >= 1, got ", args->max_tokens);
    VT_CHECK(!args->model.model.empty(),
             "generate: no MODEL given, and this build embeds no default model: pass a checkpoint directory");
    const std::string dir = args->model.model;
    std::optional<Tokenizer> tokenizer;
    const std::string tok_path = (std::filesystem::path(dir) / "tokenizer.json").string();
    if (std::filesystem::exists(tok_path)) tokenizer = Tokenizer::FromDir(dir);
    std::vector<int32_t> prompt;
    if (!args->prompt.empty()) {
      VT_CHECK(tokenizer.has_value(), "generate: --prompt needs a tokenizer, but ", tok_path,
               " does not exist (use --prompt-ids)");
      prompt = tokenizer->Encode(args->prompt, /*add_special_tokens=*/true);
      VT_CHECK(!prompt.empty(), "generate: --prompt encodes to no tokens");
    } else {
      prompt = ParsePromptIds(args->prompt_ids);
    }
    const model::GenerationConfig gen = model::GenerationConfig::FromDir(dir);
    SamplingParams sp;
    sp.temperature = args->temperature.value_or(gen.temperature);
    sp.top_p = args->top_p.value_or(gen.top_p);
    sp.top_k = args->top_k.value_or(gen.top_k);
    VT_CHECK(sp.temperature >= 0 && std::isfinite(sp.temperature), "generate: --temperature must be >= 0, got ",
             sp.temperature);
    VT_CHECK(sp.top_p > 0 && sp.top_p <= 1, "generate: --top-p must be in (0, 1], got ", sp.top_p);
    VT_CHECK(sp.top_k >= 0, "generate: --top-k must be >= 0, got ", sp.top_k);
    std::mt19937_64 rng(args->seed.value_or(std::random_device{}()));

    auto model = LoadModel(args->model);
    std::set<int64_t> eos(gen.eos_token_ids.begin(), gen.eos_token_ids.end());
    eos.insert(model->config().eos_token_ids.begin(), model->config().eos_token_ids.end());
    if (tokenizer && tokenizer->eos_token_id()) eos.insert(*tokenizer->eos_token_id());
    const int64_t P = static_cast<int64_t>(prompt.size());
    const int64_t max_len = model->config().max_position_embeddings;
    VT_CHECK(P < max_len, "generate: the prompt has ", P, " tokens but the model's context is ", max_len);
    const int64_t budget = std::min<int64_t>(args->max_tokens, max_len - P);

    model::KvCache cache = model->MakeKvCache(P + budget);
    model::SequenceKv seq;
    std::vector<int64_t> pos(prompt.size());
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<float> logits = model->Forward(prompt, pos, {&cache, &seq});
    std::vector<int32_t> out;
    for (int64_t i = 0; i < budget; ++i) {
      const int32_t tok = SampleToken(logits, sp, rng);
      out.push_back(tok);
      if (eos.count(tok) || i + 1 == budget) break;
      const int64_t p = seq.num_tokens;
      logits = model->Forward(std::vector<int32_t>{tok}, std::vector<int64_t>{p}, {&cache, &seq});
    }
    const std::string text = tokenizer ? tokenizer->Decode(out, /*skip_special_tokens=*/true) : std::string();
    if (args->json) {
      nlohmann::json j;
      j["token_ids"] = out;
      j["text"] = text;
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else if (tokenizer) {
      std::printf("%s\n", text.c_str());
    } else {
      std::string s;
      for (int32_t t : out) s += (s.empty() ? "" : " ") + std::to_string(t);
      std::printf("%s\n", s.c_str());
    }
  });
}

}  // namespace vtllm::cli
