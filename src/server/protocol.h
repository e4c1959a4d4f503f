// The OpenAI request schema, in one place: /v1/completions and /v1/chat/completions bodies
// become a validated ParsedRequest (engine requests plus what the response needs), with
// vLLM's field names, defaults and ranges. Unknown fields are ignored, as vLLM does; every
// refusal is an ApiError naming the field.
//
// Pure functions of the body and a ProtocolContext: no engine, no I/O (tests and the fuzzer
// call them with a tokenizer alone).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/fields.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vtllm::server {

enum class Endpoint { kCompletions, kChat };
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// What the server was started with that shapes request parsing.
struct ProtocolContext {
  std::vector<std::string> served_model_names;  // the first is reported when a body names none
  const Tokenizer* tokenizer = nullptr;         // null: token-id prompts only, no chat
  const ChatTemplate* chat_template = nullptr;  // the model's template (null: no chat)
  const ChatTemplate* tool_chat_template = nullptr;  // the one for requests with tools (may equal it)
  engine::SamplingParams defaults;              // what unset fields take (generation_config.json)
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;                       // token ids must be below it
  int max_logprobs = 20;
  int max_n = 128;
  bool priority_scheduling = false;             // --scheduling-policy priority
  std::string reasoning_parser;                 // "" or "qwen3"
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;                 // "" or "hermes"
};

inline constexpr size_t kMaxPrompts = 1024;  // prompts in one completions body
inline constexpr size_t kMaxChoices = 4096;  // prompts * n in one body

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;  // as reported in responses
  std::vector<std::vector<int32_t>> prompts;  // one engine request per prompt
  std::vector<std::string> prompt_texts;      // the prompts' text (echo); chat: the rendered prompt
  engine::SamplingParams params;
  int priority = 0;
  std::string cache_salt;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool continuous_usage_stats = false;  // stream_options.continuous_usage_stats
  bool echo = false;
  std::optional<int> prompt_logprobs_to_return;  // completions echo+logprobs: prompt positions too
  bool return_prompt_logprobs = false;  // the body asked for prompt_logprobs (vLLM's field in the response)
  // chat
  std::string echo_text;            // chat echo: the last message's content when its role is assistant
  bool parse_reasoning = false;     // --reasoning-parser applies
  bool prompt_opens_reasoning = false;  // the rendered prompt ends inside <think>
  bool parse_tools = false;         // the tool-call parser applies
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string named_tool;           // tool_choice {"type": "function", "function": {"name": ...}}
  // tool_choice required / named: the output is forced by a grammar (params.structured) and
  // read by GuidedToolParser instead of the tool-call parser.
  bool guided_tools = false;
};

// Raises 400 / 404 (unknown model) ApiErrors.
ParsedRequest ParseCompletionRequest(const Json& body, const ProtocolContext& ctx);
ParsedRequest ParseChatRequest(const Json& body, const ProtocolContext& ctx);

// The pieces both endpoints share (used by the two parsers and by /tokenize).
std::string ResolveModel(const Json& body, const ProtocolContext& ctx);
// Sampling fields common to both endpoints (max_tokens aside).
void ParseSamplingFields(const Json& body, const ProtocolContext& ctx, ParsedRequest& req);
// response_format, structured_outputs, guided_json -> params.structured (400 naming the field
// on a bad or unsupported schema).
void ParseStructuredOutputs(const Json& body, ParsedRequest& req);
// tool_choice required / named: the grammar that forces the call(s), from the tools' parameters.
void ApplyToolChoiceGrammar(const Json& tools, ParsedRequest& req);
// Checks each prompt against the context and max_tokens, with vLLM's messages.
void CheckContextLength(ParsedRequest& req, const ProtocolContext& ctx);

// Renders a chat body's messages (+ tools, chat_template_kwargs, add_generation_prompt,
// continue_final_message) through the chat template; used by chat and /tokenize.
struct RenderedChat {
  std::string text;
  std::string last_role, last_content;
};
RenderedChat RenderChat(const Json& body, const ProtocolContext& ctx);

// /tokenize: {"prompt": "..."} or {"messages": [...]} (+ add_special_tokens,
// add_generation_prompt, ...). /detokenize: {"tokens": [...]}.
struct TokenizeResult {
  std::vector<int32_t> tokens;
  std::optional<std::string> rendered;  // chat form: the template's text
};
TokenizeResult ParseTokenizeRequest(const Json& body, const ProtocolContext& ctx);
std::vector<int32_t> ParseDetokenizeRequest(const Json& body, const ProtocolContext& ctx);

}  // namespace vtllm::server
