// Ids (and decodes) of the real Qwen3 and Llama 3 tokenizers against the JS implementation
// @lenml/tokenizers run by node, over tests/fixtures/tokenizer/peer_corpus.json plus strings
// generated from varied fragments.
//
// The corpus avoids the few characters where the JS peer itself departs from Hugging Face
// tokenizers (its regex `\s` includes U+FEFF and lacks U+0085; its case-insensitive contraction
// rule lacks the long s U+017F and the Kelvin sign); those are covered by the HF oracle instead.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "tokenizer_test_util.h"

namespace vtllm::test {
namespace {

std::vector<std::string> Corpus() {
  const std::string path = std::string(VTLLM_FIXTURES_DIR) + "/tokenizer/peer_corpus.json";
  std::vector<std::string> texts = nlohmann::json::parse(ReadText(path)).get<std::vector<std::string>>();
  // Generated strings: random concatenations of fragments that stress the split regex and the
  // added-token matcher at their boundaries. std::mt19937's output is fixed by the standard.
  static const char* kFragments[] = {
      "Hello", " world", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n ", "don't", " I'M", "'ll",
      "'s", "'", "\"", "123", "4567", " 89", "3.14", "-", "_", "__init__", "()", "{}", "[]", ";",
      "::", "->", "=>", "!=", "...", "?!", "中文", "数学", "日本語", "ひらがな", "カタカナ",
      "한국어", "Русский", "Ελληνικά", "العربية", "עברית", "हिन्दी", "ไทย", "é", "e\u0301",
      "\u00c5", "A\u030a", "😀", "👨‍👩‍👧", "🇺🇸", "1️⃣", "👋🏽", "\u00a0", "\u3000", "\u2003",
      "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
      "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|im_sta",
      "<|", "|>", "<", ">", "aaaaaaaaaaaaaaaa", "          ", "0000000000", "zzz", "ABC", "x",
      "ℝ", "∑", "½", "①", "ﬁ", "™", "$", "%", "#", "@", "\\", "/", "|", "`", "~", "^", "&", "*",
  };
  constexpr size_t kNumFragments = sizeof(kFragments) / sizeof(kFragments[0]);
  std::mt19937 rng(20240501u);
  for (int i = 0; i < 400; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 14);
    for (int k = 0; k < n; ++k) s += kFragments[rng() % kNumFragments];
    texts.push_back(std::move(s));
  }
  return texts;
}

void ComparePeer(const Tokenizer* tok, const ModelFiles& files, const char* name,
                 bool add_special_tokens) {
  const std::vector<std::string> texts = Corpus();
  const PeerResult peer = RunPeer(files, texts, add_special_tokens, /*decode=*/true);
  ASSERT_TRUE(peer.ok);
  size_t compared = 0, mismatches = 0, tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto got = tok->Encode(texts[i], add_special_tokens);
    tokens += got.size();
    if (got != peer.ids[i]) {
      if (++mismatches <= 10) {
        ADD_FAILURE() << name << " text #" << i << ": " << Escaped(texts[i]) << "\n got "
                      << IdsToString(got) << "\nwant " << IdsToString(peer.ids[i]);
      }
    }
    EXPECT_EQ(tok->Decode(peer.ids[i]), peer.decoded[i]) << name << " decode #" << i;
    EXPECT_EQ(tok->Decode(peer.ids[i], true), peer.decoded_skip[i]) << name << " decode(skip) #" << i;
    ++compared;
  }
  EXPECT_EQ(mismatches, 0u) << name << ": " << mismatches << " of " << compared << " differ";
  EXPECT_GE(compared, 450u);
  std::printf("[js-peer] %s: compared %zu strings (%zu tokens) with @lenml/tokenizers, %zu differ\n",
              name, compared, tokens, mismatches);
}

TEST(JsPeer, Qwen3CorpusIdsMatch) {
  const Tokenizer* tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  ComparePeer(tok, Qwen3Files(), "qwen3", false);
}

TEST(JsPeer, Llama3CorpusIdsMatch) {
  const Tokenizer* tok = Llama3();
  ASSERT_NE(tok, nullptr);
  ComparePeer(tok, Llama3Files(), "llama3", false);
}

// The shipped Llama 3 tokenizer.json has only a ByteLevel post-processor, so add_special_tokens
// adds nothing (as in tokenizers); the peer must agree.
TEST(JsPeer, Llama3ShippedPostProcessorAddsNothing) {
  const Tokenizer* tok = Llama3();
  ASSERT_NE(tok, nullptr);
  const std::vector<std::string> texts = {"Hello world", "", "<|begin_of_text|>hi"};
  const PeerResult peer = RunPeer(Llama3Files(), texts, true, false);
  ASSERT_TRUE(peer.ok);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(tok->Encode(texts[i], true), peer.ids[i]) << i;
}

// Later Llama 3 releases add <|begin_of_text|> through a TemplateProcessing post-processor; the
// same tokenizer.json with that post-processor must add the bos token, as the peer does.
TEST(JsPeer, Llama3TemplateProcessingAddsBos) {
  const Tokenizer* base = Llama3();
  ASSERT_NE(base, nullptr);
  ModelFiles files = Llama3Files();
  auto j = nlohmann::json::parse(ReadText(files.tokenizer_json));
  j["post_processor"] = nlohmann::json::parse(R"({
    "type": "Sequence",
    "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}}],
       "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}}],
       "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000],
                                                  "tokens": ["<|begin_of_text|>"]}}}]})");
  files.tokenizer_json = TempPath("llama3_bos_tokenizer.json");
  std::ofstream(files.tokenizer_json, std::ios::binary) << j.dump();
  const Tokenizer tok = Tokenizer::FromFiles(files.tokenizer_json, files.tokenizer_config);
  const std::vector<std::string> texts = {"Hello world", "", "The capital of France is",
                                          "<|begin_of_text|>already there"};
  const PeerResult peer = RunPeer(files, texts, true, false);
  std::filesystem::remove(files.tokenizer_json);
  ASSERT_TRUE(peer.ok);
  ASSERT_TRUE(tok.bos_token_id().has_value());
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = tok.Encode(texts[i], true);
    EXPECT_EQ(ids, peer.ids[i]) << Escaped(texts[i]);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), *tok.bos_token_id());
    EXPECT_EQ(tok.Encode(texts[i], false), base->Encode(texts[i], false));
  }
}

// Text that is not valid UTF-8 is encoded as Python's bytes.decode("utf-8", "replace") decodes
// it: one U+FFFD per maximal ill-formed subpart. The expected repaired strings below follow
// Python's documented behaviour; the peer encodes them.
TEST(JsPeer, InvalidUtf8IsEncodedAsPythonReplaceDecodes) {
  const Tokenizer* tok = Qwen3();
  ASSERT_NE(tok, nullptr);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"\xff\xfe" "abc", "\uFFFD\uFFFD" "abc"},
      {"caf\xe9", "caf\uFFFD"},                       // Latin-1 byte
      {"\xe2\x82 euro", "\uFFFD euro"},               // truncated 3-byte sequence
      {"\xed\xa0\x80x", "\uFFFD\uFFFD\uFFFDx"},       // encoded surrogate
      {"\xc0\xaf/", "\uFFFD\uFFFD/"},                 // overlong
      {"end\xf0\x9f\x98", "end\uFFFD"},               // truncated at the end
      {"\xf4\x90\x80\x80!", "\uFFFD\uFFFD\uFFFD\uFFFD!"},  // above U+10FFFF
      {"<|im_start|>\x80<|im_end|>", "<|im_start|>\uFFFD<|im_end|>"},
  };
  std::vector<std::string> repaired;
  for (const auto& c : cases) repaired.push_back(c.second);
  const PeerResult peer = RunPeer(Qwen3Files(), repaired, false, false);
  ASSERT_TRUE(peer.ok);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(tok->Encode(cases[i].first), peer.ids[i]) << Escaped(cases[i].first);
  }
}

// Added-token flags as the JS peer implements them (lstrip/rstrip), on the real Qwen3 file with
// <|im_start|> switched to lstrip+rstrip and <|im_end|> to rstrip.
TEST(JsPeer, Qwen3AddedTokenStripFlags) {
  ModelFiles files = Qwen3Files();
  if (!HaveFiles(files)) return;
  auto j = nlohmann::json::parse(ReadText(files.tokenizer_json));
  for (auto& t : j["added_tokens"]) {
    if (t["content"] == "<|im_start|>") t["lstrip"] = t["rstrip"] = true;
    if (t["content"] == "<|im_end|>") t["rstrip"] = true;
  }
  files.tokenizer_json = TempPath("qwen3_strip_tokenizer.json");
  std::ofstream(files.tokenizer_json, std::ios::binary) << j.dump();
  const Tokenizer tok = Tokenizer::FromFiles(files.tokenizer_json, files.tokenizer_config);
  const std::vector<std::string> texts = {
      "a  <|im_start|>  b", "x\n\n<|im_start|>\n\nuser<|im_end|>  \n tail", "<|im_start|> <|im_start|> ",
      "  <|im_end|>  <|im_start|>", "no tokens here  "};
  const PeerResult peer = RunPeer(files, texts, false, false);
  std::filesystem::remove(files.tokenizer_json);
  ASSERT_TRUE(peer.ok);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(tok.Encode(texts[i]), peer.ids[i]) << Escaped(texts[i]);
  }
}

}  // namespace
}  // namespace vtllm::test
