// Jinja lexer: splits a template into text and tag tokens, applying whitespace control the way
// Jinja does with trim_blocks and lstrip_blocks (the settings transformers renders chat
// templates with), `{%-`/`-%}` markers, `{%+`/`+%}` overrides, comments and raw blocks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vtllm::jinja {

struct Token {
  enum class Type {
    kText,        // template data, whitespace control already applied
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,
    kString,      // value is the unescaped string
    kInteger,     // value is the digits, underscores removed
    kFloat,
    kOperator,    // value is the operator text: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
    kEof,
  };
  Type type;
  std::string value;
  int line;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws TemplateSyntaxError (unclosed tags, comments or strings; unexpected characters).
std::vector<Token> Tokenize(std::string_view source, const LexerOptions& options);

}  // namespace vtllm::jinja
