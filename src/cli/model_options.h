// Options shared by the subcommands that run a model (generate, logits, bench): the model
// directory, --device and --dtype, and --prompt-ids parsing.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/model.h"

namespace vtllm::cli {

struct ModelArgs {
  std::string model;           // checkpoint directory ("" = the embedded default)
  std::string device = "cpu";  // cpu | cuda | cuda:N
  std::string dtype = "auto";  // auto | bfloat16 | float32
  int threads = 0;             // CPU threads (0: all)
  std::string cpu_isa = "best";  // cap on the CPU kernels' instruction set
  bool enforce_eager = false;    // CUDA: no graph replays
  std::string quantization;      // "" (the checkpoint's), fp8 (online), modelopt, compressed-tensors
  std::string kv_cache_dtype = "auto";  // auto (the activation dtype), fp8 or fp8_e4m3
  int tensor_parallel_size = 1;         // ranks the model is split over
  bool async_scheduling = false, no_async_scheduling = false;  // neither: the engine's default
};

// --async-scheduling / --no-async-scheduling as the engine's setting (nullopt: neither given).
std::optional<bool> AsyncSchedulingFor(const ModelArgs& args);

// Adds --device, --dtype, --threads, --cpu-isa, --enforce-eager, --quantization,
// --kv-cache-dtype, --tensor-parallel-size and --[no-]async-scheduling to `cmd`.
void AddModelFlags(CLI::App* cmd, ModelArgs& args);

// The load options the flags name; throws vt::Error naming a bad flag value.
model::LoadOptions LoadOptionsFor(const ModelArgs& args, bool progress = true);
// The checkpoint directory: args.model, or the embedded default model when it is empty.
std::string ModelDir(const ModelArgs& args);

// Loads args.model on the chosen device; throws vt::Error naming a bad flag value.
std::unique_ptr<model::Model> LoadModel(const ModelArgs& args, bool progress = true);

// "1,2,3" -> {1, 2, 3}; throws naming the first entry that is not a non-negative integer.
std::vector<int32_t> ParsePromptIds(const std::string& text);

}  // namespace vtllm::cli
