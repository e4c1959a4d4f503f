// Errors raised while parsing or rendering a Jinja template. Every error carries the template
// line it refers to (1-based; 0 when no line applies) and names it in what().
#pragma once

#include <stdexcept>
#include <string>

namespace vtllm::jinja {

class TemplateError : public std::runtime_error {
 public:
  TemplateError(const std::string& kind, int line, const std::string& message)
      : std::runtime_error(Format(kind, line, message)), line_(line), message_(message) {}
  int line() const { return line_; }
  // The message without the kind/line prefix.
  const std::string& message() const { return message_; }

 private:
  static std::string Format(const std::string& kind, int line, const std::string& message) {
    std::string s = kind;
    if (line > 0) s += " at template line " + std::to_string(line);
    return s + ": " + message;
  }
  int line_;
  std::string message_;
};

// The template text is malformed (unclosed tag, bad expression, unknown tag).
class TemplateSyntaxError : public TemplateError {
 public:
  TemplateSyntaxError(int line, const std::string& message)
      : TemplateError("template syntax error", line, message) {}
};

// The template uses a Jinja feature this interpreter does not implement. Raised instead of
// producing output that might differ from Jinja's.
class TemplateUnsupportedError : public TemplateError {
 public:
  TemplateUnsupportedError(int line, const std::string& message)
      : TemplateError("unsupported template construct", line, message) {}
};

// A runtime failure with Python/Jinja semantics: type errors, undefined attribute access,
// division by zero, resource limits.
class TemplateRuntimeError : public TemplateError {
 public:
  TemplateRuntimeError(int line, const std::string& message)
      : TemplateError("template error", line, message) {}
};

// The template called raise_exception(message); message() is the template's text.
class TemplateRaisedError : public TemplateError {
 public:
  TemplateRaisedError(int line, const std::string& message)
      : TemplateError("template raised an exception", line, message) {}
};

}  // namespace vtllm::jinja
