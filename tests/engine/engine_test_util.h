// Helpers the engine test binaries share (engine_tests and engine_cuda_tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <memory>

#include "engine/engine.h"
#include "model/model_oracle.h"

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

// The tiny random Qwen3 of the oracles (tests/fixtures/oracles/qwen3-tiny), loaded once per
// binary on the CPU with f32 activations.
inline const std::string kTiny = std::string(VTLLM_FIXTURES_DIR) + "/oracles/qwen3-tiny";
inline std::shared_ptr<model::Model> TinyModel() {
  static std::shared_ptr<model::Model> m =
      model::Model::Load(kTiny + "/bf16", model::testing::CpuOptions(vt::DType::kF32));
  return m;
}

}  // namespace vtllm::engine::test_util
