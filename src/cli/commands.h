// The subcommands of `vtllm`. Each lives in its own cmd_<name>.cpp and adds itself to the
// app from the function declared here; main.cpp calls them in the order of `vtllm --help`.
#pragma once

#include <CLI/CLI.hpp>

namespace vtllm::cli {

// Each Add*Command creates its subcommand on `app` and sets its callback. A callback
// reports failure by throwing; main turns exceptions into "error: ..." and exit code 1.
void AddServeCommand(CLI::App& app);
void AddGenerateCommand(CLI::App& app);
void AddChatCommand(CLI::App& app);
void AddPerplexityCommand(CLI::App& app);
void AddLogitsCommand(CLI::App& app);
void AddTokenizeCommand(CLI::App& app);
void AddQuantizeCommand(CLI::App& app);
void AddBenchCommand(CLI::App& app);
// `bench throughput`, a subcommand of `bench` (called from AddBenchCommand).
void AddBenchThroughputCommand(CLI::App& bench);
// Adds `serve` to the `bench` subcommand AddBenchCommand created (call after it).
void AddBenchServeCommand(CLI::App& app);

}  // namespace vtllm::cli
