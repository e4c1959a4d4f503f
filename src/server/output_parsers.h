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
//     stays content. Calls stream as vLLM streams them: once a block's leading `"name"` string is
//     complete the call begins (id, name, arguments ""), then the `"arguments"` object's text
//     streams as it is generated, holding back trailing '}' and whitespace (they may close the
//     block's object). A call's arguments are the model's own text of that object, so the
//     concatenated fragments equal the complete call's arguments at any chunking. A block that
//     has begun stays a call: if it is then cut off or turns out not to be JSON, the call ends
//     with the arguments streamed so far.
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

// One streaming step of a call: `begin` carries the id and name (arguments may follow in the
// same update); later updates carry argument text only. `index` counts the parser's calls.
struct ToolCallUpdate {
  size_t index = 0;
  bool begin = false;
  std::string id, name, arguments;
};

struct ToolDelta {
  std::string content;
  std::vector<ToolCall> calls;          // calls completed by this push
  std::vector<ToolCallUpdate> updates;  // the same calls as they stream
};

class HermesToolParser {
 public:
  ToolDelta Push(std::string_view text);
  ToolDelta Finish();

 private:
  enum class State { kContent, kInCall, kAfterCall };
  void ScanCall(std::string_view body, ToolDelta& out);  // body: the block's text so far
  void CloseCall(const std::string& body, bool complete, ToolDelta& out);
  void Emit(ToolDelta& out, bool begin, std::string arguments);
  State state_ = State::kContent;
  std::string held_;
  // the block being read
  size_t num_calls_ = 0;
  bool begun_ = false, scan_done_ = false;
  std::string id_, name_;
  size_t name_end_ = 0;                       // offset after the name string
  size_t args_start_ = std::string::npos;     // offset of the arguments object's '{'
  size_t streamed_ = 0;                       // argument bytes emitted
};

// tool_choice named / required under guided decoding, as vLLM reads them (no tags): named: the
// whole output is the named function's arguments, streamed as they come (call 0 begins with the
// first text); required: the output is a JSON array [{"name": ..., "parameters": {...}}, ...]
// and each element becomes a call when its object is complete (arguments: the parameters as
// compact JSON, as vLLM re-serializes them).
class GuidedToolParser {
 public:
  GuidedToolParser(bool required, std::string name) : required_(required), name_(std::move(name)) {}
  ToolDelta Push(std::string_view text);
  ToolDelta Finish();

 private:
  void EmitObject(ToolDelta& out);
  bool required_;
  std::string name_;
  size_t num_calls_ = 0;
  bool begun_ = false;
  std::string id_;
  // required: the array being scanned
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false;
  std::string object_;  // the element object being read
};

// Length of the longest suffix of `text` that is a proper prefix of `tag` (bytes to hold back).
size_t PartialTagSuffix(std::string_view text, std::string_view tag);

// Random lowercase hex, n digits (response and tool-call ids).
std::string RandomHex(size_t n);

}  // namespace vtllm::server
