#pragma once

#include <stdexcept>
#include <string>

namespace vtllm {

// Thrown for a tokenizer.json / tokenizer_config.json that cannot be loaded (malformed JSON, a
// missing or mistyped field, a component type or option this tokenizer does not implement) and
// for files that cannot be read. The message names the file, the JSON path and the offending value.
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace vtllm
