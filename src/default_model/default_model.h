// vtllm's embedded default model: a small Qwen3 trained on the Brown Corpus, in static FP8
// W8A8 (ModelOpt layout); models/default/README.md says how it was made. It is what `vtllm
// serve`, `generate`, `chat` and `vtllm_engine_create(NULL, ...)` run when no MODEL is given.
#pragma once

#include <string>

namespace vtllm {

// A checkpoint directory holding the default model: its files are written on first use to
// $XDG_CACHE_HOME/vtllm (else $HOME/.cache/vtllm, else the system's temporary folder), in a
// folder named by a hash of their contents, and reused after that. Throws std::runtime_error
// naming the folder when it cannot be written.
std::string DefaultModelDir();

}  // namespace vtllm
