// vtllm perplexity [MODEL] --file TEXT [--window N] [--max-windows N] [--json]
// Perplexity of a text through the engine's prompt logprobs: the text is tokenized without
// special tokens and cut into non-overlapping windows of --window tokens (default: the
// model's context, at most 512); each window is its own sequence from position 0, scored
// from its second token; perplexity = exp(mean negative log-likelihood).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "engine/engine.h"
#include "vt/error.h"

namespace vtllm::cli {

void AddPerplexityCommand(CLI::App& app) {
  struct Args {
    ModelArgs model;
    std::string file;
    int64_t window = 0, max_windows = 0;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of a text file (prompt logprobs)");
  cmd->add_option("MODEL", args->model.model, "checkpoint directory (default: the embedded model)");
  cmd->add_option("--file", args->file, "UTF-8 text file")->required();
  cmd->add_option("--window", args->window, "tokens per window (default: the context, at most 512)");
  cmd->add_option("--max-windows", args->max_windows, "score only the first N windows (0: all)");
  cmd->add_flag("--json", args->json, "print one JSON object with every window");
  AddModelFlags(cmd, args->model);
  cmd->callback([args] {
    std::ifstream f(args->file, std::ios::binary);
    VT_CHECK(f.good(), "perplexity: cannot open --file \"", args->file, "\"");
    std::stringstream ss;
    ss << f.rdbuf();
    engine::EngineConfig config;
    config.model_dir = ModelDir(args->model);
    config.load = LoadOptionsFor(args->model);
    config.async_scheduling = AsyncSchedulingFor(args->model);
    config.enable_prefix_caching = false;
    engine::Engine eng(config);
    VT_CHECK(eng.tokenizer().has_value(), "perplexity: ", config.model_dir, " has no tokenizer.json");
    const std::vector<int32_t> ids = eng.tokenizer()->Encode(ss.str(), /*add_special_tokens=*/false);
    const int64_t W = args->window > 0 ? args->window : std::min<int64_t>(eng.max_model_len(), 512);
    VT_CHECK(W >= 2 && W <= eng.max_model_len(), "perplexity: --window must be in [2, ", eng.max_model_len(),
             "], got ", W);
    struct Window {
      int64_t start, end;
      double nll = 0;
      int64_t scored = 0;
    };
    std::vector<Window> windows;
    for (int64_t s = 0; s < static_cast<int64_t>(ids.size()); s += W) {
      const int64_t e = std::min<int64_t>(s + W, static_cast<int64_t>(ids.size()));
      if (e - s < 2) break;
      windows.push_back({s, e});
      if (args->max_windows > 0 && static_cast<int64_t>(windows.size()) == args->max_windows) break;
    }
    VT_CHECK(!windows.empty(), "perplexity: ", args->file, " has fewer than 2 tokens");
    for (size_t w = 0; w < windows.size(); ++w) {
      engine::EngineRequest r;
      r.request_id = std::to_string(w);
      r.prompt_token_ids.assign(ids.begin() + windows[w].start, ids.begin() + windows[w].end);
      r.params = eng.default_params();
      r.params.temperature = 0;
      r.params.max_tokens = 0;  // score the window only
      r.params.prompt_logprobs = 0;
      eng.AddRequest(r);
    }
    while (eng.HasUnfinished())
      for (const engine::RequestOutput& o : eng.Step()) {
        if (o.error) throw vt::Error(vt::StrCat("perplexity: ", *o.error));
        if (!o.prompt_logprobs) continue;
        Window& w = windows[static_cast<size_t>(std::stoll(o.request_id))];
        for (const engine::PositionLogprobs& p : *o.prompt_logprobs) {
          w.nll -= p.chosen.logprob;
          ++w.scored;
        }
      }
    double nll = 0;
    int64_t scored = 0;
    nlohmann::json jw = nlohmann::json::array();
    for (const Window& w : windows) {
      nll += w.nll;
      scored += w.scored;
      jw.push_back({{"start", w.start}, {"end", w.end}, {"nll_sum", w.nll}, {"scored", w.scored}});
    }
    const double ppl = std::exp(nll / static_cast<double>(scored));
    if (args->json) {
      nlohmann::json j = {{"model", config.model_dir}, {"perplexity", ppl}, {"mean_nll", nll / scored},
                          {"scored_tokens", scored}, {"window", W}, {"windows", jw}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("perplexity %.4f over %lld tokens in %zu windows of %lld (mean NLL %.5f)\n", ppl,
                  static_cast<long long>(scored), windows.size(), static_cast<long long>(W), nll / scored);
    }
  });
}

}  // namespace vtllm::cli
