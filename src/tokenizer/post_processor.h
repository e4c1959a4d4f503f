// tokenizer.json "post_processor" for single sequences: the ids added around the encoded text
// when add_special_tokens is requested. Supported: TemplateProcessing, ByteLevel (adds nothing),
// RobertaProcessing, BertProcessing, and Sequence of these.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/json_util.h"

namespace vtllm::tok {

struct PostProcessor {
  std::vector<int32_t> prefix;  // ids before the text
  std::vector<int32_t> suffix;  // ids after the text

  // `j` may be null. Throws TokenizerError for unsupported types or malformed templates.
  static PostProcessor FromJson(const Json& j, std::string_view path);

 private:
  void Parse(const Json& j, std::string_view path);
};

}  // namespace vtllm::tok
