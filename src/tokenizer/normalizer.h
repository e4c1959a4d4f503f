// tokenizer.json "normalizer": Unicode normalization forms, alone or in a Sequence.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_util.h"

namespace vtllm::tok {

class Normalizer {
 public:
  enum class Form { kNFC, kNFD, kNFKC, kNFKD };

  // `j` may be null (no normalization). Unknown types throw TokenizerError naming them.
  static Normalizer FromJson(const Json& j, std::string_view path);

  bool empty() const { return forms_.empty(); }

  // Normalizes valid UTF-8 `in`. Returns `in` itself when nothing changes, else a view of `buf`.
  std::string_view Apply(std::string_view in, std::string& buf) const;

 private:
  void Parse(const Json& j, std::string_view path);
  std::vector<Form> forms_;
};

}  // namespace vtllm::tok
