// Helpers the engine test binaries share (engine_tests and engine_cuda_tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace vtllm::engine::test_util {

// prefix + number, built without operator+ (GCC 12 warns falsely on it at -O3).
inline std::string Id(const char* prefix, size_t i) {
  std::string s(prefix);
  s.append(std::to_string(i));
  return s;
}
inline std::string Id(size_t i) { return Id("r", i); }

// A greedy request for max_tokens tokens that ignores EOS.
inline EngineRequest Greedy(const std::string& id, std::vector<int32_t> prompt, int64_t max_tokens) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

}  // namespace vtllm::engine::test_util
