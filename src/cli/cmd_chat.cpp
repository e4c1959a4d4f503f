// vtllm chat [MODEL]: an interactive chat through the engine. Each line is a user turn; the
// model's chat template renders the whole history, the answer streams as it is generated.
// "/reset" forgets the history, "/exit" (or end of input) quits, Ctrl-C stops the current
// answer (Ctrl-C while waiting for input quits). When stdin is not a terminal, lines are read
// from it the same way, with no prompt shown (tests drive it so).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "vt/error.h"

namespace vtllm::cli {

namespace {

std::atomic<int> g_interrupts{0};
void OnInterrupt(int) { g_interrupts.fetch_add(1); }

}  // namespace

void AddChatCommand(CLI::App& app) {
  struct Args {
    ModelArgs model;
    int64_t max_tokens = 256;
    std::optional<double> temperature;
    std::optional<uint64_t> seed;
    std::string system;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("chat", "Interactive chat (stdin lines when not a terminal)");
  cmd->add_option("MODEL", args->model.model, "checkpoint directory (default: the embedded model)");
  cmd->add_option("--max-tokens", args->max_tokens, "tokens per answer at most")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0 = greedy (default: generation_config.json)");
  cmd->add_option("--seed", args->seed, "sampling seed");
  cmd->add_option("--system", args->system, "a system message at the start of every conversation");
  AddModelFlags(cmd, args->model);
  cmd->callback([args] {
    engine::EngineConfig config;
    config.model_dir = ModelDir(args->model);
    config.load = LoadOptionsFor(args->model);
    config.async_scheduling = AsyncSchedulingFor(args->model);
    config.max_num_seqs = 1;
    engine::Engine eng(config);
    VT_CHECK(eng.tokenizer().has_value(), "chat: ", config.model_dir, " has no tokenizer.json");
    const ChatTemplate tmpl = ChatTemplate::ForTokenizer(*eng.tokenizer());
    const bool tty = ::isatty(STDIN_FILENO) != 0;
    struct sigaction sa {};
    sa.sa_handler = OnInterrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);

    nlohmann::ordered_json history = nlohmann::ordered_json::array();
    auto reset = [&] {
      history = nlohmann::ordered_json::array();
      if (!args->system.empty()) history.push_back({{"role", "system"}, {"content", args->system}});
    };
    reset();
    if (tty) std::printf("vtllm chat: %s (/reset, /exit; Ctrl-C stops an answer)\n", config.model_dir.c_str());
    std::string line;
    int turn = 0;
    while (true) {
      if (tty) {
        std::printf("> ");
        std::fflush(stdout);
      }
      g_interrupts = 0;
      if (!std::getline(std::cin, line)) break;
      if (line == "/exit") break;
      if (line == "/reset") {
        reset();
        if (tty) std::printf("(history cleared)\n");
        continue;
      }
      if (line.empty()) continue;
      history.push_back({{"role", "user"}, {"content", line}});
      const std::string prompt = tmpl.Render(history, /*add_generation_prompt=*/true);
      engine::EngineRequest req;
      req.request_id = "chat-" + std::to_string(turn++);
      req.prompt_token_ids = eng.tokenizer()->Encode(prompt, /*add_special_tokens=*/false);
      req.params = eng.default_params();
      if (args->temperature) req.params.temperature = *args->temperature;
      if (args->seed) req.params.seed = *args->seed + static_cast<uint64_t>(turn);
      const int64_t room = eng.max_model_len() - static_cast<int64_t>(req.prompt_token_ids.size());
      if (room < 1) {
        std::printf("(the conversation fills the model's context of %lld tokens: /reset)\n",
                    static_cast<long long>(eng.max_model_len()));
        history.erase(history.end() - 1);
        continue;
      }
      req.params.max_tokens = std::min(args->max_tokens, room);
      eng.AddRequest(req);
      std::string answer;
      bool stopped = false;
      while (eng.HasUnfinished()) {
        if (g_interrupts.load() > 0 && !stopped) {
          eng.Abort(req.request_id);
          stopped = true;
        }
        for (const engine::RequestOutput& o : eng.Step())
          for (const engine::CompletionDelta& d : o.completions) {
            answer += d.text;
            std::fputs(d.text.c_str(), stdout);
            std::fflush(stdout);
          }
      }
      std::printf(stopped ? " [stopped]\n" : "\n");
      history.push_back({{"role", "assistant"}, {"content", answer}});
    }
  });
}

}  // namespace vtllm::cli
