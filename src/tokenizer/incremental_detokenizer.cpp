#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace vtllm {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::Push(int32_t id) {
  if (skip_special_tokens_ && tokenizer_.IsSpecial(id)) return {};
  pending_.append(tokenizer_.TokenBytes(id));
  // Emit everything up to the start of a trailing sequence that could still complete; ill-formed
  // bytes before it are replaced exactly as the full decode replaces them, because the full
  // decode's replacement of a maximal subpart never depends on bytes after it.
  size_t i = 0, keep_from = pending_.size();
  while (i < pending_.size()) {
    const tok::Utf8Step st = tok::DecodeUtf8(pending_, i);
    if (st.kind == tok::Utf8Step::kIncomplete) {
      keep_from = i;
      break;
    }
    i += st.len;
  }
  std::string out;
  tok::AppendUtf8Lossy(std::string_view(pending_).substr(0, keep_from), out);
  pending_.erase(0, keep_from);
  return out;
}

std::string IncrementalDetokenizer::Finish() {
  std::string out;
  tok::AppendUtf8Lossy(pending_, out);
  pending_.clear();
  return out;
}

}  // namespace vtllm
