// vtllm: one binary, subcommands (see DESIGN.md "The vtllm command").
#include <cstdio>
#include <exception>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"vtllm: LLM inference and serving with static FP8 W8A8 on CPU and CUDA"};
  app.require_subcommand(1);
  // One line per subcommand, in the order `vtllm --help` lists them.
  vtllm::cli::AddServeCommand(app);
  vtllm::cli::AddGenerateCommand(app);
  vtllm::cli::AddChatCommand(app);
  vtllm::cli::AddPerplexityCommand(app);
  vtllm::cli::AddLogitsCommand(app);
  vtllm::cli::AddTokenizeCommand(app);
  vtllm::cli::AddQuantizeCommand(app);
  vtllm::cli::AddBenchCommand(app);
  vtllm::cli::AddBenchServeCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
