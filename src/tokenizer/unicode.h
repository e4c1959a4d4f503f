// Unicode character classes the tokenizer needs outside the regex engine, defined as Hugging Face
// tokenizers (Rust) defines them.
#pragma once

namespace vtllm::tok {

// Unicode White_Space (Rust's char::is_whitespace and regex `\s`).
bool IsWhiteSpace(char32_t cp);

// Rust regex `\w`: Alphabetic, marks, decimal digits, connector punctuation, join controls.
// Alphabetic is approximated by the letter and letter-number categories.
bool IsWordChar(char32_t cp);

// Rust's char::is_numeric: general categories Nd, Nl and No.
bool IsNumeric(char32_t cp);

}  // namespace vtllm::tok
