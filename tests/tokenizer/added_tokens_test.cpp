// Added-token matching options, with the splits Hugging Face tokenizers' own unit tests expect
// (added_vocabulary.rs: test_single_word_is_correct, test_lstrip_unicode_space,
// can_extract_added_tokens), on the synthetic byte-level tokenizer.
#include <gtest/gtest.h>

#include "synthetic_tokenizer.h"
#include "tokenizer_test_util.h"

namespace vtllm::test {
namespace {

struct Piece {
  std::string text;
  int32_t id;  // -1: plain text, encoded by the model
};

// The ids tokenizers gives for a sequence of splits: added tokens as their id, plain text through
// the model (each plain split is encoded on its own, so its ids are those of encoding it alone).
std::vector<int32_t> Expected(const Tokenizer& t, const std::vector<Piece>& pieces) {
  std::vector<int32_t> ids;
  for (const auto& p : pieces) {
    if (p.id >= 0) {
      ids.push_back(p.id);
    } else {
      const auto sub = t.Encode(p.text);
      ids.insert(ids.end(), sub.begin(), sub.end());
    }
  }
  return ids;
}

Tokenizer WithAddedTokens(const nlohmann::json& added) {
  auto j = SyntheticTokenizerJson();
  j["added_tokens"] = added;
  return Tokenizer::FromJson(j.dump());
}

TEST(AddedTokens, SingleWord) {
  const Tokenizer t = WithAddedTokens(nlohmann::json::parse(
      R"([{"id": 300, "content": "<mask>", "single_word": true, "lstrip": false, "rstrip": false,
           "normalized": false, "special": false}])"));
  const std::string text = "<mask> My name <mask> A<mask> <mask>ony <mask>";
  EXPECT_EQ(t.Encode(text), Expected(t, {{"<mask>", 300}, {" My name ", -1}, {"<mask>", 300},
                                         {" A<mask> <mask>ony ", -1}, {"<mask>", 300}}));
  // Punctuation is not a word character, a combining mark is.
  const std::string text2 = "<mask>, <mask>- \u25cc\u0330<mask>";
  EXPECT_EQ(t.Encode(text2), Expected(t, {{"<mask>", 300}, {", ", -1}, {"<mask>", 300},
                                          {"- \u25cc\u0330<mask>", -1}}));
}

TEST(AddedTokens, LstripRstripUnicodeSpace) {
  const Tokenizer t = WithAddedTokens(nlohmann::json::parse(
      R"([{"id": 300, "content": "<mask>", "single_word": true, "lstrip": true, "rstrip": true,
           "normalized": false, "special": false}])"));
  const std::string text = "Hi <mask> there\t<mask>\t<mask>\u2000";
  EXPECT_EQ(t.Encode(text), Expected(t, {{"Hi", -1}, {" <mask> ", 300}, {"there", -1},
                                         {"\t<mask>\t", 300}, {"<mask>\u2000", 300}}));
  EXPECT_EQ(t.Decode(t.Encode(text)), "Hi<mask>there<mask><mask>");
}

TEST(AddedTokens, SpecialAndNormalTokensExtracted) {
  const Tokenizer t = WithAddedTokens(nlohmann::json::parse(R"([
      {"id": 300, "content": "my", "normalized": true, "special": false},
      {"id": 301, "content": "name", "normalized": true, "special": false},
      {"id": 302, "content": "[CLS]", "normalized": false, "special": true},
      {"id": 303, "content": "[SEP]", "normalized": false, "special": true}])"));
  const std::string text = "[CLS] My name is Anthony [SEP]";
  EXPECT_EQ(t.Encode(text), Expected(t, {{"[CLS]", 302}, {" My ", -1}, {"name", 301},
                                         {" is Anthony ", -1}, {"[SEP]", 303}}));
  const auto ids = t.Encode(text);
  EXPECT_EQ(t.Decode(ids), text);
  EXPECT_EQ(t.Decode(ids, true), " My name is Anthony ");
  EXPECT_TRUE(t.IsSpecial(302));
  EXPECT_FALSE(t.IsSpecial(301));
  EXPECT_EQ(t.TokenToId("[SEP]"), 303);
  EXPECT_EQ(t.IdToToken(300), "my");
  EXPECT_EQ(t.VocabSize(), 304u);
}

TEST(AddedTokens, LeftmostLongestMatch) {
  const Tokenizer t = WithAddedTokens(nlohmann::json::parse(R"([
      {"id": 300, "content": "<a>", "normalized": false, "special": true},
      {"id": 301, "content": "<a><b>", "normalized": false, "special": true},
      {"id": 302, "content": "a><b", "normalized": false, "special": true}])"));
  EXPECT_EQ(t.Encode("x<a><b>y<a>"), Expected(t, {{"x", -1}, {"<a><b>", 301}, {"y", -1}, {"<a>", 300}}));
}

TEST(AddedTokens, Qwen3SpecialTokens) {
  const Tokenizer* t = Qwen3();
  ASSERT_NE(t, nullptr);
  // Ids as listed in the file's added_tokens.
  EXPECT_EQ(t->TokenToId("<|endoftext|>"), 151643);
  EXPECT_EQ(t->TokenToId("<|im_start|>"), 151644);
  EXPECT_EQ(t->TokenToId("<|im_end|>"), 151645);
  EXPECT_EQ(t->IdToToken(151644), "<|im_start|>");
  EXPECT_TRUE(t->IsSpecial(151644));
  EXPECT_EQ(t->eos_token(), "<|im_end|>");
  EXPECT_EQ(t->eos_token_id(), 151645);
  EXPECT_FALSE(t->bos_token().has_value());
  EXPECT_EQ(t->pad_token_id(), 151643);
  EXPECT_NE(t->chat_template().find("<|im_start|>"), std::string::npos);
  const auto think = t->TokenToId("<think>");
  ASSERT_TRUE(think.has_value());
  EXPECT_FALSE(t->IsSpecial(*think));  // <think> is an added, non-special token
  EXPECT_EQ(t->Encode("<|im_start|>"), std::vector<int32_t>{151644});
  const std::vector<int32_t> ids = t->Encode("<|im_start|>user\nhi<|im_end|><think>x</think>");
  EXPECT_EQ(t->Decode(ids, true), "user\nhi<think>x</think>");
  // Out-of-range ids are skipped by decode, as tokenizers does.
  EXPECT_EQ(t->Decode(std::vector<int32_t>{-1, 9707, 99999999}), "Hello");
  EXPECT_FALSE(t->IdToToken(-3).has_value());
}

TEST(AddedTokens, Llama3ConfigTokens) {
  const Tokenizer* t = Llama3();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(t->bos_token_id(), 128000);
  EXPECT_EQ(t->eos_token_id(), 128001);
  EXPECT_TRUE(t->clean_up_tokenization_spaces());
  EXPECT_EQ(t->VocabSize(), 128256u);
  // transformers' clean-up, applied on request.
  const auto ids = t->Encode("Hello , world . I do n't know !");
  DecodeOptions o;
  o.clean_up_tokenization_spaces = true;
  EXPECT_EQ(t->Decode(ids, o), "Hello, world. I don't know!");
}

}  // namespace
}  // namespace vtllm::test
