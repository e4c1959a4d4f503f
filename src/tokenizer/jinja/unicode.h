// UTF-8 helpers with Python str semantics: strings are UTF-8 bytes here, but lengths, indices,
// slicing and character classes follow Python, which counts code points.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace vtllm::jinja::unicode {

// Code points of s; a malformed byte decodes to U+FFFD (inputs are validated JSON or template
// text, so this only guards against crashes).
std::u32string Decode(std::string_view s);
std::string Encode(std::u32string_view s);
void Append(std::string& out, char32_t cp);
bool IsAscii(std::string_view s);
size_t Length(std::string_view s);

// Python's str.isspace() for one code point.
bool IsSpace(char32_t c);
// Python's str.isprintable() for one code point (used by repr()).
bool IsPrintable(char32_t c);
bool IsAlpha(char32_t c);
bool IsDigit(char32_t c);
bool IsUpper(char32_t c);
bool IsLower(char32_t c);
char32_t ToUpper(char32_t c);
char32_t ToLower(char32_t c);
std::string Upper(std::string_view s);
std::string Lower(std::string_view s);

}  // namespace vtllm::jinja::unicode
