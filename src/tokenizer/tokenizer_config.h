// The parts of tokenizer_config.json (transformers' tokenizer settings) the engine uses.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace vtllm::tok {

struct TokenizerConfig {
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  std::string chat_template;                           // the default template
  std::map<std::string, std::string> chat_templates;   // named templates, when given as a list
  bool clean_up_tokenization_spaces = false;
  nlohmann::json raw = nlohmann::json::object();

  // Throws TokenizerError naming the field for malformed JSON or mistyped known fields.
  static TokenizerConfig FromJson(std::string_view text);
};

}  // namespace vtllm::tok
