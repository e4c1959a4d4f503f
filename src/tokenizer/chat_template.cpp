// GCC 12 reports a false -Wrestrict inside std::string's operator+ when inlined at -O3
// (GCC bug 105329); it must be silenced before <string> is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include "tokenizer/chat_template.h"

#include <stdexcept>

#include "tokenizer/tokenizer.h"

namespace vtllm {

ChatTemplate::ChatTemplate(std::string_view source)
    : template_(std::make_shared<jinja::Template>(source, jinja::LexerOptions{})) {}

ChatTemplate ChatTemplate::ForTokenizer(const Tokenizer& tokenizer, bool with_tools) {
  std::string source;
  const auto& named = tokenizer.chat_templates();
  if (!named.empty()) {
    auto it = with_tools ? named.find("tool_use") : named.end();
    if (it == named.end()) it = named.find("default");
    if (it == named.end()) {
      throw std::runtime_error("tokenizer_config.json has named chat templates but none called 'default'" +
                               std::string(with_tools ? " or 'tool_use'" : ""));
    }
    source = it->second;
  } else {
    source = tokenizer.chat_template();
  }
  if (source.empty()) throw std::runtime_error("the tokenizer has no chat template (tokenizer_config.json 'chat_template')");
  ChatTemplate t(source);
  t.default_bos_ = tokenizer.bos_token();
  t.default_eos_ = tokenizer.eos_token();
  return t;
}

std::string ChatTemplate::Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& tools, const nlohmann::ordered_json& extra_kwargs,
                                 std::optional<std::string> bos_token, std::optional<std::string> eos_token) const {
  if (!messages.is_array()) throw jinja::TemplateRuntimeError(0, "chat messages must be a JSON array");
  if (!tools.is_null() && !tools.is_array()) throw jinja::TemplateRuntimeError(0, "chat tools must be a JSON array or null");
  if (!extra_kwargs.is_null() && !extra_kwargs.is_object()) {
    throw jinja::TemplateRuntimeError(0, "extra chat template arguments must be a JSON object");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (!bos_token) bos_token = default_bos_;
  if (!eos_token) eos_token = default_eos_;
  if (bos_token) context["bos_token"] = *bos_token;
  if (eos_token) context["eos_token"] = *eos_token;
  if (extra_kwargs.is_object()) {
    for (const auto& [k, v] : extra_kwargs.items()) {
      if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt") {
        throw jinja::TemplateRuntimeError(0, "extra chat template argument '" + k + "' clashes with a fixed one");
      }
      context[k] = v;
    }
  }
  context["messages"] = messages;
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  return template_->Render(context, options_);
}

}  // namespace vtllm
