// tokenizer.json "pre_tokenizer": splits text into the words the BPE model sees. Supported:
// Split (regex or literal, every delimiter behavior, invert), Digits, ByteLevel and Sequence.
//
// The model works on raw bytes, so the ByteLevel step's byte-to-character mapping is implicit:
// the words produced here are raw UTF-8 bytes, and the vocabulary is keyed by bytes as well.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"

namespace vtllm::tok {

struct PreTokenizeScratch {
  std::vector<std::string_view> words, next;
  std::vector<std::pair<size_t, size_t>> matches;
  std::deque<std::string> owned;  // words that are not slices of the input (prefix space added)
};

class PreTokenizer {
 public:
  // `j` may be null. Throws TokenizerError for unsupported types or options.
  static PreTokenizer FromJson(const Json& j, std::string_view path);

  PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // True when the last step is ByteLevel (required by the byte-level BPE model).
  bool ends_with_byte_level() const;

  // Splits valid UTF-8 `text` into s.words (views into `text` or into s.owned).
  void Run(std::string_view text, PreTokenizeScratch& s) const;

 private:
  struct Step;
  void Parse(const Json& j, std::string_view path);
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace vtllm::tok
