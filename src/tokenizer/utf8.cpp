#include "tokenizer/utf8.h"

namespace vtllm::tok {

Utf8Step DecodeUtf8(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  const unsigned char b0 = p[i];
  if (b0 < 0x80) return {Utf8Step::kValid, 1, b0};
  // Allowed range of the second byte and the total length, per Unicode Table 3-7.
  unsigned char lo = 0x80, hi = 0xBF;
  uint8_t len;
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Step::kInvalid, 1, 0};
  }
  for (uint8_t k = 1; k < len; ++k) {
    if (i + k >= n) return {Utf8Step::kIncomplete, k, 0};
    const unsigned char b = p[i + k];
    const unsigned char klo = k == 1 ? lo : 0x80, khi = k == 1 ? hi : 0xBF;
    if (b < klo || b > khi) return {Utf8Step::kInvalid, k, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Step::kValid, len, cp};
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // ASCII fast path, eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    const Utf8Step st = DecodeUtf8(s, i);
    if (st.kind != Utf8Step::kValid) return false;
    i += st.len;
  }
  return true;
}

void AppendUtf8Lossy(std::string_view bytes, std::string& out) {
  size_t i = 0;
  const size_t n = bytes.size();
  size_t run = 0;  // start of the current run of valid bytes
  while (i < n) {
    const Utf8Step st = DecodeUtf8(bytes, i);
    if (st.kind == Utf8Step::kValid) {
      i += st.len;
      continue;
    }
    out.append(bytes.substr(run, i - run));
    out.append(kReplacementChar);
    i += st.len;  // an incomplete tail is one maximal subpart up to the end
    run = i;
  }
  out.append(bytes.substr(run, n - run));
}

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t PrevCodePoint(std::string_view s, size_t end, size_t& start) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  start = i;
  size_t j = i;
  return NextCodePoint(s, j);
}

}  // namespace vtllm::tok
