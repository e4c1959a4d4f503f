// GCC 12 reports a false -Wrestrict inside std::string's operator+ when inlined at -O3
// (GCC bug 105329); it must be silenced before <string> is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include "tokenizer/jinja/template.h"

#include <chrono>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/parser.h"

namespace vtllm::jinja {

Template::Template(std::string_view source, const LexerOptions& options) : body_(Parse(Tokenize(source, options))) {}

std::string Template::Render(const std::vector<std::pair<std::string, Value>>& variables,
                             const RenderOptions& options) const {
  auto globals = std::make_shared<Scope>();
  AddGlobals(*globals);
  auto context = std::make_shared<Scope>(globals);
  for (const auto& [name, value] : variables) context->Set(name, value);
  std::function<std::time_t()> clock = options.clock;
  if (!clock) clock = [] { return std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()); };
  Interpreter interp(options.limits, std::move(clock));
  return interp.Render(body_, context);
}

std::string Template::Render(const nlohmann::ordered_json& variables, const RenderOptions& options) const {
  if (!variables.is_object()) throw TemplateRuntimeError(0, "the template context must be a JSON object");
  std::vector<std::pair<std::string, Value>> vars;
  for (const auto& [k, v] : variables.items()) {
    try {
      vars.emplace_back(k, FromJson(v));
    } catch (const std::invalid_argument& e) {
      throw TemplateRuntimeError(0, "context variable '" + k + "': " + e.what());
    }
  }
  return Render(vars, options);
}

}  // namespace vtllm::jinja
