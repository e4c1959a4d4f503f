// Checks of an EngineRequest against the model and the engine's limits, done when a request is
// added (and by AsyncEngine on the caller's thread): every failure is a RequestError naming the
// field and the value. Reads only immutable facts, so it is safe from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/request.h"
#include "tokenizer/tokenizer.h"

namespace vtllm::engine {

struct RequestValidator {
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  int max_logprobs = 20;
  int max_n = 128;
  const Tokenizer* tokenizer = nullptr;  // null: no text (stop strings and bad words refused)

  void Validate(const EngineRequest& r) const;
  // The token sequences of params.bad_words (each word with and without a leading space).
  std::vector<std::vector<int32_t>> BadWordsIds(const SamplingParams& p) const;
};

}  // namespace vtllm::engine
