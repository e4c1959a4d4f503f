// A compiled PCRE2 pattern (UTF, UCP, JIT) with the match semantics of the Oniguruma engine that
// Hugging Face tokenizers uses for `Split` patterns.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace vtllm::tok {

class Regex {
 public:
  // `pattern` uses the Oniguruma/Rust dialect found in tokenizer.json; `\s`, `\S`, `\w`, `\W` and
  // `\d` are rewritten to their Unicode definitions there (PCRE2's `\s` also matches U+180E and its
  // `\w` lacks marks). `literal` escapes the whole pattern (tokenizer.json `{"String": ...}`).
  // Throws TokenizerError (naming `path`) if the pattern does not compile.
  Regex(std::string_view pattern, bool literal, std::string_view path);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [start, end) byte ranges of all successive matches in valid UTF-8 `subject`.
  // After an empty match the search resumes one character later, as Oniguruma's iterator does.
  void FindAll(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& translated() const { return translated_; }

 private:
  std::string translated_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace vtllm::tok
