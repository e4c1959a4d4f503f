#include "server/output_parsers.h"

#include <mutex>
#include <random>

#include <nlohmann/json.hpp>

namespace vtllm::server {

namespace {
constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>", kToolClose = "</tool_call>";
}  // namespace

size_t PartialTagSuffix(std::string_view text, std::string_view tag) {
  const size_t max = std::min(text.size(), tag.size() - 1);
  for (size_t len = max; len > 0; --len)
    if (text.substr(text.size() - len) == tag.substr(0, len)) return len;
  return 0;
}

std::string RandomHex(size_t n) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string s(n, '0');
  std::lock_guard<std::mutex> lock(mu);
  for (char& c : s) c = digits[rng() & 15];
  return s;
}

ReasoningDelta ReasoningParser::Push(std::string_view text) {
  ReasoningDelta out;
  held_.append(text);
  while (!held_.empty()) {
    if (state_ == State::kStart) {
      // Leading whitespace may precede the block; anything else means there is none.
      const size_t b = held_.find_first_not_of(" \t\r\n");
      if (b == std::string::npos) return out;  // only whitespace so far
      const std::string_view rest = std::string_view(held_).substr(b);
      if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
        held_.erase(0, b + kThinkOpen.size());
        state_ = State::kReasoning;
      } else if (kThinkOpen.substr(0, rest.size()) == rest) {
        return out;  // could still become "<think>"
      } else {
        state_ = State::kContent;
      }
    } else if (state_ == State::kReasoning) {
      const size_t end = held_.find(kThinkClose);
      if (end == std::string::npos) {
        const size_t keep = PartialTagSuffix(held_, kThinkClose);
        out.reasoning += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      out.reasoning += held_.substr(0, end);
      held_.erase(0, end + kThinkClose.size());
      state_ = State::kContent;
    } else {
      out.content += held_;
      held_.clear();
    }
  }
  return out;
}

ReasoningDelta ReasoningParser::Finish() {
  ReasoningDelta out;
  if (state_ == State::kReasoning) out.reasoning = std::move(held_);
  else out.content = std::move(held_);
  held_.clear();
  return out;
}

void HermesToolParser::CloseCall(const std::string& body, ToolDelta& out) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("name") && j["name"].is_string()) {
    ToolCall call;
    call.id = "chatcmpl-tool-" + RandomHex(32);
    call.name = j["name"].get<std::string>();
    const auto args = j.find("arguments");
    if (args == j.end() || args->is_null()) call.arguments = "{}";
    else if (args->is_string()) call.arguments = args->get<std::string>();
    else call.arguments = args->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    out.calls.push_back(std::move(call));
  } else {
    out.content += std::string(kToolOpen) + body + std::string(kToolClose);
  }
}

ToolDelta HermesToolParser::Push(std::string_view text) {
  ToolDelta out;
  held_.append(text);
  for (;;) {
    if (state_ == State::kInCall) {
      const size_t end = held_.find(kToolClose);
      if (end == std::string::npos) return out;
      CloseCall(held_.substr(0, end), out);
      held_.erase(0, end + kToolClose.size());
      state_ = State::kAfterCall;
      continue;
    }
    const size_t start = held_.find(kToolOpen);
    if (start == std::string::npos) {
      const size_t keep = PartialTagSuffix(held_, kToolOpen);
      if (state_ == State::kContent) out.content += held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    if (state_ == State::kContent) out.content += held_.substr(0, start);
    held_.erase(0, start + kToolOpen.size());
    state_ = State::kInCall;
  }
}

ToolDelta HermesToolParser::Finish() {
  ToolDelta out;
  if (state_ == State::kContent) out.content = std::move(held_);
  else if (state_ == State::kInCall) out.content = std::string(kToolOpen) + held_;  // unterminated block
  held_.clear();
  return out;
}

}  // namespace vtllm::server
