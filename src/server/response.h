// Engine outputs -> OpenAI responses: the non-streaming body and the streaming chunks of
// /v1/completions and /v1/chat/completions, with usage, logprobs (each endpoint's shape),
// echo, finish_reason / stop_reason, and the reasoning and tool-call parsers for chat.
//
// A ResponseBuilder is fed each RequestOutput of each prompt's engine request as it arrives;
// when streaming it returns the chunks that output makes. Pure data in and out (tests build
// RequestOutputs by hand); the server adds the SSE framing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/fields.h"
#include "server/output_parsers.h"
#include "server/protocol.h"

namespace vtllm::server {

struct ResponseMeta {
  std::string id;        // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;   // unix seconds
  std::string model;
  const Tokenizer* tokenizer = nullptr;  // token text in logprobs (null: "token_id:N")
};

// "cmpl-<32 hex>" / "chatcmpl-<32 hex>".
std::string NewResponseId(Endpoint endpoint);

class ResponseBuilder {
 public:
  ResponseBuilder(const ParsedRequest& req, ResponseMeta meta);
  ~ResponseBuilder();
  ResponseBuilder(const ResponseBuilder&) = delete;
  ResponseBuilder& operator=(const ResponseBuilder&) = delete;

  // Chunks that open a stream (chat: one role chunk per choice, as vLLM sends first).
  std::vector<Json> Start();
  // Takes one output of prompt `prompt_index`; returns its chunks when streaming.
  std::vector<Json> Add(size_t prompt_index, const engine::RequestOutput& out);
  // Chunks that close a stream: the usage chunk (choices: []) with include_usage.
  std::vector<Json> End();
  // The non-streaming response body, once every prompt has finished.
  Json Response() const;

  bool finished() const;  // every prompt's request has finished
  // The first engine-side failure reported by an output (then the response is an error).
  const std::optional<std::string>& error() const { return error_; }
  Json Usage() const;

 private:
  struct Choice;
  struct Prompt;
  Choice& ChoiceAt(size_t prompt_index, int child);
  Json ChunkBase() const;
  Json CompletionLogprobs(const std::vector<engine::PositionLogprobs>& lps, const std::vector<int32_t>& ids,
                          size_t& text_offset, bool first_is_null) const;
  Json ChatLogprobs(const std::vector<engine::PositionLogprobs>& lps) const;
  Json PromptLogprobs(const Prompt& p) const;
  std::string TokenText(int32_t id) const;
  Json StopReason(const Choice& c) const;
  std::string FinishReason(const Choice& c) const;
  void Parse(Choice& c, const std::string& text, bool final, Json& delta);

  const ParsedRequest& req_;
  ResponseMeta meta_;
  std::vector<Prompt> prompts_;
  std::vector<std::unique_ptr<Choice>> choices_;  // prompt_index * n + child
  std::optional<std::string> error_;
};

}  // namespace vtllm::server
