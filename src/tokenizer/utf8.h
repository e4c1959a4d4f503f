// UTF-8 helpers shared by the tokenizer: validation, lossy conversion and code point decoding.
//
// Invalid UTF-8 is replaced the way Python's `bytes.decode("utf-8", "replace")` and Rust's
// `String::from_utf8_lossy` do it: each maximal ill-formed subpart (Unicode 15, section 3.9,
// "U+FFFD Substitution of Maximal Subparts") becomes one U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vtllm::tok {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

struct Utf8Step {
  enum Kind : uint8_t {
    kValid,       // a well-formed sequence of `len` bytes encoding `cp`
    kInvalid,     // an ill-formed maximal subpart of `len` (>= 1) bytes
    kIncomplete,  // the text ends inside a sequence that could still become well-formed
  };
  Kind kind;
  uint8_t len;
  char32_t cp;
};

// Decodes the sequence starting at s[i] (i < s.size()).
Utf8Step DecodeUtf8(std::string_view s, size_t i);

bool IsValidUtf8(std::string_view s);

// Appends `bytes` to `out`, replacing every maximal ill-formed subpart (an incomplete sequence at
// the end included) with U+FFFD.
void AppendUtf8Lossy(std::string_view bytes, std::string& out);

void AppendUtf8(char32_t cp, std::string& out);

// Length of the first code point of valid UTF-8 `s` starting at i (1 for a stray byte).
inline size_t Utf8Len(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// Decodes the code point at s[i] of valid UTF-8; advances i.
inline char32_t NextCodePoint(std::string_view s, size_t& i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  if (p[0] < 0x80) {
    i += 1;
    return p[0];
  }
  if (p[0] < 0xE0) {
    i += 2;
    return (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (p[0] < 0xF0) {
    i += 3;
    return (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  i += 4;
  return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
         (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

// Decodes the code point that ends at s[end - 1] of valid UTF-8; returns its start in `start`.
char32_t PrevCodePoint(std::string_view s, size_t end, size_t& start);

}  // namespace vtllm::tok
