// vtllm logits MODEL --prompt-ids 1,2,3 --out FILE: the logits of every prompt position,
// f32 [T, vocab], little-endian, row-major.
#include <cstdio>
#include <fstream>
#include <numeric>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "vt/error.h"

namespace vtllm::cli {

void AddLogitsCommand(CLI::App& app) {
  struct Args {
    ModelArgs model;
    std::string prompt_ids, out;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every prompt position (f32 [T, vocab], LE)");
  cmd->add_option("MODEL", args->model.model, "checkpoint directory")->required();
  cmd->add_option("--prompt-ids", args->prompt_ids, "comma-separated token ids")->required();
  cmd->add_option("--out", args->out, "output file")->required();
  AddModelFlags(cmd, args->model);
  cmd->callback([args] {
    const std::vector<int32_t> ids = ParsePromptIds(args->prompt_ids);
    auto model = LoadModel(args->model);
    const int64_t T = static_cast<int64_t>(ids.size());
    model::KvCache cache = model->MakeKvCache(T);
    model::SequenceKv seq;
    std::vector<int64_t> pos(ids.size());
    std::iota(pos.begin(), pos.end(), 0);
    const std::vector<float> logits = model->Forward(ids, pos, {&cache, &seq}, /*all_logits=*/true);
    std::ofstream f(args->out, std::ios::binary);
    VT_CHECK(f.good(), "logits: cannot open --out \"", args->out, "\" for writing");
    static_assert(std::endian::native == std::endian::little, "the logits file is little-endian");
    f.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
    VT_CHECK(f.good(), "logits: writing \"", args->out, "\" failed");
    std::fprintf(stderr, "wrote %s: f32 [%lld, %lld]\n", args->out.c_str(), static_cast<long long>(T),
                 static_cast<long long>(model->vocab_size()));
  });
}

}  // namespace vtllm::cli
