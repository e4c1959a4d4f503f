#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace vtllm::tok {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 512> to_byte{};  // indexed by character (all mapped characters are < 512)
  Tables() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_char[b] = printable ? char32_t(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& T() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t ByteToChar(unsigned char b) { return T().to_char[b]; }

bool ByteLevelDecode(std::string_view token, std::string& out) {
  const Tables& t = T();
  const size_t old = out.size();
  size_t i = 0;
  while (i < token.size()) {
    const char32_t c = NextCodePoint(token, i);
    if (c >= 512 || t.to_byte[c] < 0) {
      out.resize(old);
      return false;
    }
    out.push_back(static_cast<char>(t.to_byte[c]));
  }
  return true;
}

void ByteLevelEncode(std::string_view bytes, std::string& out) {
  for (const char b : bytes) AppendUtf8(ByteToChar(static_cast<unsigned char>(b)), out);
}

}  // namespace vtllm::tok
