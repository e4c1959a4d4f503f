// Parsers of generated text for chat responses, streaming-capable: each takes text deltas as
// they come and returns what they complete, holding back only the bytes that may begin a tag.
// Non-streaming responses run the same parsers over the whole text, so both agree.
//
//   ReasoningParser (--reasoning-parser qwen3): "<think>...</think>" -> the message's
//     `reasoning`, the rest -> `content`. Output starts outside the block unless the prompt
//     opened one (templates that end the generation prompt with "<think>\n").
//   HermesToolParser (--tool-call-parser hermes): "<tool_call>{"name": ..., "arguments": ...}
//     </tool_call>" blocks -> tool calls; text before the first block -> content; text between
//     and after blocks is dropped, as vLLM's hermes parser does. A block that is not such JSON
//     stays content.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace vtllm::server {

struct ReasoningDelta {
  std::string reasoning, content;
};

class ReasoningParser {
 public:
  explicit ReasoningParser(bool starts_in_reasoning = false)
      : state_(starts_in_reasoning ? State::kReasoning : State::kStart) {}
  ReasoningDelta Push(std::string_view text);
  ReasoningDelta Finish();  // flushes what was held back

 private:
  enum class State { kStart, kReasoning, kContent };
  State state_;
  std::string held_;
};

struct ToolCall {
  std::string id;         // "chatcmpl-tool-<hex>"
  std::string name;
  std::string arguments;  // JSON text
};

struct ToolDelta {
  std::string content;
  std::vector<ToolCall> calls;
};

class HermesToolParser {
 public:
  ToolDelta Push(std::string_view text);
  ToolDelta Finish();

 private:
  enum class State { kContent, kInCall, kAfterCall };
  void CloseCall(const std::string& body, ToolDelta& out);
  State state_ = State::kContent;
  std::string held_;
};

// Length of the longest suffix of `text` that is a proper prefix of `tag` (bytes to hold back).
size_t PartialTagSuffix(std::string_view text, std::string_view tag);

// Random lowercase hex, n digits (response and tool-call ids).
std::string RandomHex(size_t n);

}  // namespace vtllm::server
