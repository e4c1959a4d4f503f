// Recursive-descent parser for the Jinja subset chat templates use; the grammar and operator
// precedence follow Jinja's own parser (filters bind to unary expressions, `~` binds tighter
// than `+`, `**` is left-associative, comparisons chain).
#pragma once

#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace vtllm::jinja {

// Throws TemplateSyntaxError for malformed templates and TemplateUnsupportedError for tags
// Jinja has but this interpreter does not (include, extends, block, import, ...).
Body Parse(const std::vector<Token>& tokens);

}  // namespace vtllm::jinja
