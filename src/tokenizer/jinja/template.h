// A parsed Jinja template. Parse once, render many times; rendering is const and thread-safe
// (each Render has its own interpreter state).
#pragma once

#include <ctime>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/value.h"

namespace vtllm::jinja {

struct RenderOptions {
  RenderLimits limits;
  // The clock strftime_now() reads; the system clock when empty.
  std::function<std::time_t()> clock;
};

class Template {
 public:
  // Throws TemplateSyntaxError / TemplateUnsupportedError.
  explicit Template(std::string_view source, const LexerOptions& options = {});

  // `variables`: the template's context, e.g. {"messages": ..., "add_generation_prompt": true}.
  // Jinja globals (range, namespace, raise_exception, strftime_now, ...) are visible unless a
  // variable of the same name shadows them. Throws TemplateError subclasses.
  std::string Render(const std::vector<std::pair<std::string, Value>>& variables,
                     const RenderOptions& options = {}) const;
  // Same, with a JSON object as the context (key order of nested objects is kept).
  std::string Render(const nlohmann::ordered_json& variables, const RenderOptions& options = {}) const;

 private:
  Body body_;
};

}  // namespace vtllm::jinja
