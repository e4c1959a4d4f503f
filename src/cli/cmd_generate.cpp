// vtllm generate [MODEL] (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N]
//   [--temperature T] [--top-p P] [--top-k K] [--seed N] [--json] [--device] [--dtype]
// One request through the engine: text streams to the terminal as it is generated (or, with
// --json, one object at the end). Sampling defaults come from generation_config.json (as vLLM
// reads it); --temperature 0 is greedy.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "engine/engine.h"
#include "vt/error.h"

namespace vtllm::cli {

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
    engine::EngineConfig config;
    config.model_dir = ModelDir(args->model);
    config.load = LoadOptionsFor(args->model);
    config.async_scheduling = AsyncSchedulingFor(args->model);
    config.max_num_seqs = 1;
    config.max_num_batched_tokens = 2048;
    engine::Engine eng(config);
    const std::optional<Tokenizer>& tokenizer = eng.tokenizer();
    engine::EngineRequest req;
    req.request_id = "generate";
    if (!args->prompt.empty()) {
      VT_CHECK(tokenizer.has_value(), "generate: --prompt needs a tokenizer, but ", config.model_dir,
               " has no tokenizer.json (use --prompt-ids)");
      req.prompt_token_ids = tokenizer->Encode(args->prompt, /*add_special_tokens=*/true);
      VT_CHECK(!req.prompt_token_ids.empty(), "generate: --prompt encodes to no tokens");
    } else {
      req.prompt_token_ids = ParsePromptIds(args->prompt_ids);
    }
    engine::SamplingParams& p = req.params;
    p = eng.default_params();
    if (args->temperature) p.temperature = *args->temperature;
    if (args->top_p) p.top_p = *args->top_p;
    if (args->top_k) p.top_k = static_cast<int>(*args->top_k);
    p.seed = args->seed;
    const int64_t room = eng.max_model_len() - static_cast<int64_t>(req.prompt_token_ids.size());
    VT_CHECK(room >= 1, "generate: the prompt has ", req.prompt_token_ids.size(),
             " tokens but the model's context is ", eng.max_model_len());
    p.max_tokens = std::min(args->max_tokens, room);
    try {
      eng.AddRequest(req);
    } catch (const engine::RequestError& e) {
      throw vt::Error(vt::StrCat("generate: ", e.what()));
    }
    std::vector<int32_t> out;
    std::string all;
    int printed = 0;  // ids printed (a model without a tokenizer)
    while (eng.HasUnfinished()) {
      for (const engine::RequestOutput& o : eng.Step()) {
        if (o.error) throw vt::Error(vt::StrCat("generate: ", *o.error));
        for (const engine::CompletionDelta& d : o.completions) {
          out.insert(out.end(), d.token_ids.begin(), d.token_ids.end());
          all += d.text;
          if (args->json) continue;
          if (tokenizer) {
            std::fputs(d.text.c_str(), stdout);
          } else {
            for (int32_t t : d.token_ids) std::printf("%s%d", printed++ ? " " : "", t);
          }
          std::fflush(stdout);
        }
      }
    }
    if (args->json) {
      nlohmann::json j;
      j["token_ids"] = out;
      j["text"] = all;
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("\n");
    }
  });
}

}  // namespace vtllm::cli
