// A small byte-level BPE tokenizer.json built in memory, for option and error tests.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace vtllm::test {

// Appends the GPT-2 byte-level character of byte `b` to `out` (independent re-statement of the
// published mapping: printable Latin-1 bytes are themselves, the rest U+0100.. in byte order).
inline void AppendByteChar(unsigned b, std::string& out) {
  unsigned cp = b;
  const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  if (!printable) {
    unsigned k = 0;
    for (unsigned x = 0; x < b; ++x) {
      if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) ++k;
    }
    cp = 256 + k;
  }
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Vocabulary: the 256 byte characters (id = byte value), then merges "h e", "he l", "hel l",
// "hell o", "Ġ w" ("Ġ" = space) with their results at ids 256...
inline nlohmann::json SyntheticTokenizerJson() {
  nlohmann::json vocab = nlohmann::json::object();
  for (unsigned b = 0; b < 256; ++b) {
    std::string s;
    AppendByteChar(b, s);
    vocab[s] = b;
  }
  const char* merges[][2] = {{"h", "e"}, {"he", "l"}, {"hel", "l"}, {"hell", "o"}, {"\xc4\xa0", "w"}};
  nlohmann::json m = nlohmann::json::array();
  int id = 256;
  for (auto& mg : merges) {
    m.push_back(std::string(mg[0]) + " " + mg[1]);
    vocab[std::string(mg[0]) + mg[1]] = id++;
  }
  return {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", R"( ?\p{L}+|\p{N}|\s+|[^\s\p{L}\p{N}]+)"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
        {"ignore_merges", false}, {"vocab", vocab}, {"merges", m}}},
  };
}

}  // namespace vtllm::test
