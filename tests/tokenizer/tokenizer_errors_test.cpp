// Bad tokenizer files give a TokenizerError whose message names the field and value.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "synthetic_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace vtllm::test {
namespace {

// Expects loading `j` to throw a TokenizerError mentioning every string in `parts`.
void ExpectLoadError(const std::string& json_text, std::initializer_list<const char*> parts,
                     const std::string& config = {}) {
  try {
    (void)Tokenizer::FromJson(json_text, config);
    ADD_FAILURE() << "no error for: " << json_text.substr(0, 200);
  } catch (const TokenizerError& e) {
    const std::string msg = e.what();
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(TokenizerErrors, SyntheticTokenizerLoads) {
  const Tokenizer t = Tokenizer::FromJson(SyntheticTokenizerJson().dump());
  // "hello" merges all the way; " world" keeps "Ġw" then single bytes.
  EXPECT_EQ(t.Encode("hello"), (std::vector<int32_t>{259}));
  EXPECT_EQ(t.Encode("hello world"), (std::vector<int32_t>{259, 260, 'o', 'r', 'l', 'd'}));
  EXPECT_EQ(t.Decode(t.Encode("hello world")), "hello world");
}

TEST(TokenizerErrors, MalformedJson) {
  ExpectLoadError("{\"model\": ", {"tokenizer.json", "invalid JSON"});
  ExpectLoadError("", {"tokenizer.json", "invalid JSON"});
  ExpectLoadError("[1, 2]", {"expected an object"});
  ExpectLoadError("\xff\xfe", {"invalid JSON"});
}

TEST(TokenizerErrors, UnknownModelType) {
  auto j = SyntheticTokenizerJson();
  j["model"]["type"] = "WordPiece";
  ExpectLoadError(j.dump(), {"model.type", "WordPiece"});
  j["model"]["type"] = 7;
  ExpectLoadError(j.dump(), {"model.type", "expected a string"});
}

TEST(TokenizerErrors, MissingFields) {
  auto j = SyntheticTokenizerJson();
  j.erase("model");
  ExpectLoadError(j.dump(), {"model", "missing"});
  j = SyntheticTokenizerJson();
  j["model"].erase("type");
  ExpectLoadError(j.dump(), {"model.type", "missing"});
  j = SyntheticTokenizerJson();
  j["model"].erase("vocab");
  ExpectLoadError(j.dump(), {"model.vocab", "missing"});
  j = SyntheticTokenizerJson();
  j["added_tokens"] = {{{"id", 300}}};
  ExpectLoadError(j.dump(), {"added_tokens[0].content", "missing"});
  j = SyntheticTokenizerJson();
  j["pre_tokenizer"]["pretokenizers"][0].erase("pattern");
  ExpectLoadError(j.dump(), {"pre_tokenizer.pretokenizers[0].pattern", "missing"});
}

TEST(TokenizerErrors, UnsupportedComponentsAndOptions) {
  auto j = SyntheticTokenizerJson();
  j["normalizer"] = {{"type", "Lowercase"}};
  ExpectLoadError(j.dump(), {"normalizer.type", "Lowercase"});
  j = SyntheticTokenizerJson();
  j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Metaspace"}};
  ExpectLoadError(j.dump(), {"pre_tokenizer.pretokenizers[0].type", "Metaspace"});
  j = SyntheticTokenizerJson();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  ExpectLoadError(j.dump(), {"pre_tokenizer.type", "Whitespace"});
  j = SyntheticTokenizerJson();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  ExpectLoadError(j.dump(), {"behavior", "Sideways"});
  j = SyntheticTokenizerJson();
  j["decoder"] = {{"type", "WordPiece"}};
  ExpectLoadError(j.dump(), {"decoder.type", "WordPiece"});
  j = SyntheticTokenizerJson();
  j["post_processor"] = {{"type", "Mystery"}};
  ExpectLoadError(j.dump(), {"post_processor.type", "Mystery"});
  j = SyntheticTokenizerJson();
  j["model"]["byte_fallback"] = true;
  ExpectLoadError(j.dump(), {"model.byte_fallback"});
  j = SyntheticTokenizerJson();
  j["model"]["continuing_subword_prefix"] = "##";
  ExpectLoadError(j.dump(), {"model.continuing_subword_prefix", "##"});
  j = SyntheticTokenizerJson();
  j["model"]["dropout"] = 0.1;
  ExpectLoadError(j.dump(), {"model.dropout"});
  j = SyntheticTokenizerJson();
  j["pre_tokenizer"] = nullptr;
  ExpectLoadError(j.dump(), {"pre_tokenizer", "ByteLevel"});
}

TEST(TokenizerErrors, BadValues) {
  auto j = SyntheticTokenizerJson();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  ExpectLoadError(j.dump(), {"pattern.Regex", "(unclosed"});
  j = SyntheticTokenizerJson();
  j["model"]["vocab"]["x"] = -5;
  ExpectLoadError(j.dump(), {"model.vocab", "-5"});
  j = SyntheticTokenizerJson();
  j["model"]["vocab"]["x"] = "seven";
  ExpectLoadError(j.dump(), {"model.vocab", "expected a token id"});
  j = SyntheticTokenizerJson();
  j["model"]["vocab"]["x"] = 1LL << 40;
  ExpectLoadError(j.dump(), {"model.vocab", "out of range"});
  j = SyntheticTokenizerJson();
  j["model"]["merges"].push_back("zz qq");
  ExpectLoadError(j.dump(), {"model.merges[5]", "zz"});
  j = SyntheticTokenizerJson();
  j["model"]["merges"].push_back("a b c");
  ExpectLoadError(j.dump(), {"model.merges[5]", "one space"});
  j = SyntheticTokenizerJson();
  j["model"]["merges"].push_back(42);
  ExpectLoadError(j.dump(), {"model.merges[5]"});
  j = SyntheticTokenizerJson();
  j["post_processor"] = nlohmann::json::parse(
      R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
          {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {}})");
  ExpectLoadError(j.dump(), {"post_processor.special_tokens", "<s>"});
}

TEST(TokenizerErrors, BadConfig) {
  const std::string tj = SyntheticTokenizerJson().dump();
  ExpectLoadError(tj, {"tokenizer_config.json", "invalid JSON"}, "{nope");
  ExpectLoadError(tj, {"tokenizer_config.json", "bos_token"}, R"({"bos_token": 5})");
  ExpectLoadError(tj, {"tokenizer_config.json", "chat_template"}, R"({"chat_template": 5})");
  ExpectLoadError(tj, {"tokenizer_config.json", "chat_template[0].template"},
                  R"({"chat_template": [{"name": "default"}]})");
}

TEST(TokenizerErrors, MissingFilesNameThePath) {
  try {
    (void)Tokenizer::FromDir("/nonexistent/dir");
    ADD_FAILURE() << "no error";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir"), std::string::npos) << e.what();
  }
  try {
    (void)Tokenizer::FromFiles("/nonexistent/tokenizer.json");
    ADD_FAILURE() << "no error";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, ConfigFieldsAreRead) {
  const Tokenizer t = Tokenizer::FromJson(
      SyntheticTokenizerJson().dump(),
      R"({"bos_token": {"content": "h", "__type": "AddedToken"}, "eos_token": "o",
          "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}],
          "clean_up_tokenization_spaces": true})");
  EXPECT_EQ(t.bos_token(), "h");
  EXPECT_EQ(t.bos_token_id(), 'h');
  EXPECT_EQ(t.eos_token_id(), 'o');
  EXPECT_FALSE(t.pad_token().has_value());
  EXPECT_EQ(t.chat_template(), "D");
  EXPECT_EQ(t.chat_templates().at("tool_use"), "T");
  EXPECT_TRUE(t.clean_up_tokenization_spaces());
}

TEST(TokenizerErrors, FromDirReadsSeparateChatTemplate) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("vtllm_tok_dir_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << SyntheticTokenizerJson().dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "o"})";
  std::ofstream(dir / "chat_template.jinja") << "{{ messages[0].content }}";
  const Tokenizer t = Tokenizer::FromDir(dir.string());
  EXPECT_EQ(t.chat_template(), "{{ messages[0].content }}");
  EXPECT_EQ(t.eos_token_id(), 'o');
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vtllm::test
