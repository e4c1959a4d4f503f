// `vtllm tokenize MODEL_OR_TOKENIZER_DIR [--chat]`: stdin text -> {"ids":[...]}. With --chat,
// stdin is {"messages":[...], "add_generation_prompt":true, "tools":[...], "enable_thinking":false}
// (all but messages optional); the conversation is rendered with the model's chat template and
// the output is {"ids":[...],"text":"<rendered>"}, ids being the rendered text's encoding without
// adding special tokens again (the template already wrote them).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vtllm::cli {
namespace {

using ojson = nlohmann::ordered_json;

std::string ReadStdin() {
  std::string s((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (std::cin.bad()) throw std::runtime_error("tokenize: failed to read stdin");
  return s;
}

void Print(const ojson& out) {
  std::string s = out.dump(-1, ' ', false, ojson::error_handler_t::replace);
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fputc('\n', stdout);
}

void RunChat(const Tokenizer& tok, const std::string& input) {
  ojson req;
  try {
    req = ojson::parse(input);
  } catch (const ojson::parse_error& e) {
    throw std::runtime_error(std::string("tokenize --chat: stdin is not valid JSON: ") + e.what());
  }
  if (!req.is_object()) throw std::runtime_error("tokenize --chat: stdin must be a JSON object with \"messages\"");
  for (const auto& [key, value] : req.items()) {
    if (key != "messages" && key != "add_generation_prompt" && key != "tools" && key != "enable_thinking") {
      throw std::runtime_error("tokenize --chat: unknown field \"" + key +
                               "\" (expected messages, add_generation_prompt, tools, enable_thinking)");
    }
  }
  if (!req.contains("messages") || !req["messages"].is_array()) {
    throw std::runtime_error("tokenize --chat: \"messages\" must be a JSON array");
  }
  bool add_generation_prompt = false;
  if (req.contains("add_generation_prompt")) {
    if (!req["add_generation_prompt"].is_boolean()) throw std::runtime_error("tokenize --chat: \"add_generation_prompt\" must be true or false");
    add_generation_prompt = req["add_generation_prompt"].get<bool>();
  }
  ojson tools = req.value("tools", ojson());
  if (!tools.is_null() && !tools.is_array()) throw std::runtime_error("tokenize --chat: \"tools\" must be a JSON array");
  ojson extra = ojson::object();
  if (req.contains("enable_thinking")) {
    if (!req["enable_thinking"].is_boolean()) throw std::runtime_error("tokenize --chat: \"enable_thinking\" must be true or false");
    extra["enable_thinking"] = req["enable_thinking"];
  }
  ChatTemplate tmpl = ChatTemplate::ForTokenizer(tok, !tools.is_null());
  std::string text = tmpl.Render(req["messages"], add_generation_prompt, tools, extra);
  ojson out = ojson::object();
  out["ids"] = tok.Encode(text, /*add_special_tokens=*/false);
  out["text"] = text;
  Print(out);
}

}  // namespace

void AddTokenizeCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Print the token ids of stdin as {\"ids\":[...]}; with --chat, render a chat request first");
  auto dir = std::make_shared<std::string>();
  auto chat = std::make_shared<bool>(false);
  cmd->add_option("MODEL_OR_TOKENIZER_DIR", *dir, "checkpoint or tokenizer directory (tokenizer.json, tokenizer_config.json)")
      ->required();
  cmd->add_flag("--chat", *chat,
                "stdin is {\"messages\":[...],\"add_generation_prompt\":bool,\"tools\":[...],\"enable_thinking\":bool}; "
                "also print the rendered template as \"text\"");
  cmd->callback([dir, chat] {
    Tokenizer tok = Tokenizer::FromDir(*dir);
    std::string input = ReadStdin();
    if (*chat) {
      RunChat(tok, input);
      return;
    }
    // Plain text: the ids Hugging Face's tokenizer(text) gives, post-processor tokens included.
    ojson out = ojson::object();
    out["ids"] = tok.Encode(input, /*add_special_tokens=*/true);
    Print(out);
  });
}

}  // namespace vtllm::cli
