// GPT-2's reversible byte <-> character mapping used by the ByteLevel pre-tokenizer and decoder:
// printable bytes map to themselves, the others to U+0100.. in order ("Ġ" is the space).
#pragma once

#include <string>
#include <string_view>

namespace vtllm::tok {

char32_t ByteToChar(unsigned char b);

// Maps the characters of valid UTF-8 `token` back to bytes, appending them to `out`. Returns
// false (leaving `out` as it was) if some character is not in the mapping.
bool ByteLevelDecode(std::string_view token, std::string& out);

// Appends the byte-level spelling of `bytes` (one character per byte) to `out`.
void ByteLevelEncode(std::string_view bytes, std::string& out);

}  // namespace vtllm::tok
