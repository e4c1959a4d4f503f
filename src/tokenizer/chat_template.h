// Chat templates: renders a conversation with the model's own Jinja template the way
// transformers' `apply_chat_template(..., tokenize=False)` does — the same Jinja settings
// (trim_blocks, lstrip_blocks, loop controls), the same helpers (tojson as json.dumps with
// ensure_ascii=False, raise_exception, strftime_now) and the same template variables
// (messages, tools, documents, add_generation_prompt, the special tokens, extra kwargs).
#pragma once

#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/template.h"

namespace vtllm {

class Tokenizer;

// Errors are jinja::TemplateError subclasses (std::runtime_error): TemplateSyntaxError,
// TemplateUnsupportedError, TemplateRuntimeError, TemplateRaisedError (raise_exception).
using ChatTemplateError = jinja::TemplateError;

class ChatTemplate {
 public:
  // Parses `source`; throws on malformed templates and on tags this interpreter lacks.
  explicit ChatTemplate(std::string_view source);

  // The template transformers would pick for `tokenizer`: with named templates, "tool_use"
  // when tools are given and the config has one, else "default". bos/eos come from the
  // tokenizer's config. Throws std::runtime_error when the tokenizer has no chat template.
  static ChatTemplate ForTokenizer(const Tokenizer& tokenizer, bool with_tools = false);

  // messages: JSON array of message objects. tools: JSON array, or null for none (the template
  // sees `tools` = None then, as in transformers). extra_kwargs: object of further template
  // variables (enable_thinking, date_string, ...), overriding the special tokens.
  // bos_token/eos_token: nullopt leaves the variable undefined unless ForTokenizer set it.
  // Key order of JSON objects is kept (tojson output depends on it), hence ordered_json.
  std::string Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools = nullptr,
                     const nlohmann::ordered_json& extra_kwargs = nlohmann::ordered_json::object(),
                     std::optional<std::string> bos_token = std::nullopt,
                     std::optional<std::string> eos_token = std::nullopt) const;

  // Fixes the clock strftime_now() reads (tests, reproducible prompts).
  void set_clock(std::function<std::time_t()> clock) { options_.clock = std::move(clock); }
  void set_limits(const jinja::RenderLimits& limits) { options_.limits = limits; }

 private:
  std::shared_ptr<const jinja::Template> template_;
  jinja::RenderOptions options_;
  std::optional<std::string> default_bos_, default_eos_;
};

}  // namespace vtllm
