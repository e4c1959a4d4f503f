// Encodings and decodings of the real Qwen3 and Llama 3 tokenizers against Hugging Face
// tokenizers' output: the project's fixtures (tests/fixtures/tokenizer/hf/<model>-tokenizer/,
// made by tools/oracle/tokenizer_oracle.py), including the characters where the JS peer
// departs from HF and inputs that are not valid UTF-8, and the shared oracle set's Qwen3 file
// (tests/fixtures/oracles/qwen3-tokenizer/, copied unchanged).
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace vtllm::test {
namespace {

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

void CompareOracle(const Tokenizer* tok, const char* model, const char* folder = "tokenizer/hf") {
  ASSERT_NE(tok, nullptr);
  const std::string path =
      std::string(VTLLM_FIXTURES_DIR) + "/" + folder + "/" + model + "-tokenizer/tokenizer_oracle.json";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  const auto oracle = nlohmann::json::parse(ReadText(path));
  size_t compared = 0;
  for (const auto& c : oracle.at("encode")) {
    const std::string text = c.contains("bytes_hex") ? Unhex(c.at("bytes_hex").get<std::string>())
                                                     : c.at("text").get<std::string>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    const auto got = tok->Encode(text);
    EXPECT_EQ(got, want) << model << " text: " << Escaped(text) << "\n got " << IdsToString(got)
                         << "\nwant " << IdsToString(want);
    EXPECT_EQ(tok->Decode(want), c.at("decoded").get<std::string>()) << Escaped(text);
    if (c.contains("decoded_skip_special")) {
      EXPECT_EQ(tok->Decode(want, true), c.at("decoded_skip_special").get<std::string>())
          << Escaped(text);
    }
    if (c.contains("ids_with_special")) {
      EXPECT_EQ(tok->Encode(text, true), c.at("ids_with_special").get<std::vector<int32_t>>())
          << Escaped(text);
    }
    ++compared;
  }
  EXPECT_GE(compared, 10u);
  std::printf("[hf-oracle] %s: compared %zu encodings/decodings with HF tokenizers\n", model, compared);
}

TEST(HfOracle, Qwen3EncodeAndDecodeMatchTokenizers) { CompareOracle(Qwen3(), "qwen3"); }

TEST(HfOracle, Llama3EncodeAndDecodeMatchTokenizers) { CompareOracle(Llama3(), "llama3"); }

TEST(HfOracle, Qwen3MatchesTheSharedOracleSet) { CompareOracle(Qwen3(), "qwen3", "oracles"); }

}  // namespace
}  // namespace vtllm::test
