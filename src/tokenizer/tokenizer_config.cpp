#include "tokenizer/tokenizer_config.h"

#include "tokenizer/tokenizer_error.h"

namespace vtllm::tok {
namespace {

[[noreturn]] void Fail(const std::string& field, const std::string& what) {
  throw TokenizerError("tokenizer_config.json: " + field + ": " + what);
}

std::string TypeOf(const nlohmann::json& v) { return v.type_name(); }

// A special token is a string, an AddedToken object {"content": ...}, or null.
std::optional<std::string> SpecialToken(const nlohmann::json& root, const char* key) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c == it->end() || !c->is_string()) Fail(std::string(key) + ".content", "missing or not a string");
    return c->get<std::string>();
  }
  Fail(key, "expected a string, an object with \"content\" or null, got " + TypeOf(*it));
}

}  // namespace

TokenizerConfig TokenizerConfig::FromJson(std::string_view text) {
  TokenizerConfig c;
  try {
    c.raw = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw TokenizerError(std::string("tokenizer_config.json: invalid JSON: ") + e.what());
  }
  if (!c.raw.is_object()) Fail("(root)", "expected an object, got " + TypeOf(c.raw));
  c.bos_token = SpecialToken(c.raw, "bos_token");
  c.eos_token = SpecialToken(c.raw, "eos_token");
  c.pad_token = SpecialToken(c.raw, "pad_token");
  c.unk_token = SpecialToken(c.raw, "unk_token");
  if (auto it = c.raw.find("clean_up_tokenization_spaces"); it != c.raw.end() && !it->is_null()) {
    if (!it->is_boolean()) Fail("clean_up_tokenization_spaces", "expected a boolean, got " + TypeOf(*it));
    c.clean_up_tokenization_spaces = it->get<bool>();
  }
  if (auto it = c.raw.find("chat_template"); it != c.raw.end() && !it->is_null()) {
    if (it->is_string()) {
      c.chat_template = it->get<std::string>();
    } else if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        const auto& e = (*it)[i];
        const std::string f = "chat_template[" + std::to_string(i) + "]";
        if (!e.is_object()) Fail(f, "expected {\"name\", \"template\"}, got " + TypeOf(e));
        auto n = e.find("name"), t = e.find("template");
        if (n == e.end() || !n->is_string()) Fail(f + ".name", "missing or not a string");
        if (t == e.end() || !t->is_string()) Fail(f + ".template", "missing or not a string");
        c.chat_templates[n->get<std::string>()] = t->get<std::string>();
      }
      if (auto d = c.chat_templates.find("default"); d != c.chat_templates.end()) {
        c.chat_template = d->second;
      }
    } else {
      Fail("chat_template", "expected a string or a list of named templates, got " + TypeOf(*it));
    }
  }
  return c;
}

}  // namespace vtllm::tok
