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

namespace {
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
size_t SkipSpace(std::string_view s, size_t p) {
  while (p < s.size() && IsSpace(s[p])) ++p;
  return p;
}
// At s[p]: 1 when `lit` is there, 0 when s ends inside a prefix of it, -1 when it is not.
int MatchLiteral(std::string_view s, size_t p, std::string_view lit) {
  const std::string_view rest = s.substr(p);
  if (rest.substr(0, lit.size()) == lit) return 1;
  return lit.substr(0, rest.size()) == rest ? 0 : -1;
}
}  // namespace

void HermesToolParser::Emit(ToolDelta& out, bool begin, std::string arguments) {
  ToolCallUpdate u;
  u.index = num_calls_;
  u.begin = begin;
  if (begin) {
    u.id = id_;
    u.name = name_;
  }
  u.arguments = std::move(arguments);
  out.updates.push_back(std::move(u));
}

void HermesToolParser::ScanCall(std::string_view body, ToolDelta& out) {
  if (scan_done_) return;
  if (!begun_) {  // {"name": "<string>"
    size_t p = SkipSpace(body, 0);
    if (p == body.size()) return;
    if (body[p] != '{') { scan_done_ = true; return; }
    p = SkipSpace(body, p + 1);
    const int m = MatchLiteral(body, p, "\"name\"");
    if (m <= 0) { scan_done_ = m < 0; return; }
    p = SkipSpace(body, p + 6);
    if (p == body.size()) return;
    if (body[p] != ':') { scan_done_ = true; return; }
    p = SkipSpace(body, p + 1);
    if (p == body.size()) return;
    if (body[p] != '"') { scan_done_ = true; return; }
    size_t q = p + 1;
    while (q < body.size() && body[q] != '"') q += body[q] == '\\' ? 2 : 1;
    if (q >= body.size()) return;  // the name is not complete yet
    const nlohmann::json name = nlohmann::json::parse(body.substr(p, q + 1 - p), nullptr, false);
    if (!name.is_string()) { scan_done_ = true; return; }
    begun_ = true;
    id_ = "chatcmpl-tool-" + RandomHex(32);
    name_ = name.get<std::string>();
    name_end_ = q + 1;
    Emit(out, true, "");
  }
  if (args_start_ == std::string::npos) {  // , "arguments": {
    size_t p = SkipSpace(body, name_end_);
    if (p == body.size()) return;
    if (body[p] != ',') { scan_done_ = true; return; }
    p = SkipSpace(body, p + 1);
    const int m = MatchLiteral(body, p, "\"arguments\"");
    if (m <= 0) { scan_done_ = m < 0; return; }
    p = SkipSpace(body, p + 11);
    if (p == body.size()) return;
    if (body[p] != ':') { scan_done_ = true; return; }
    p = SkipSpace(body, p + 1);
    if (p == body.size()) return;
    if (body[p] != '{') { scan_done_ = true; return; }  // not an object: sent whole at the end
    args_start_ = p;
  }
  size_t end = body.size();
  while (end > args_start_ && (IsSpace(body[end - 1]) || body[end - 1] == '}')) --end;
  if (end > args_start_ + streamed_) {
    Emit(out, false, std::string(body.substr(args_start_ + streamed_, end - args_start_ - streamed_)));
    streamed_ = end - args_start_;
  }
}

void HermesToolParser::CloseCall(const std::string& body, bool complete, ToolDelta& out) {
  ScanCall(body, out);
  const nlohmann::ordered_json j =
      complete ? nlohmann::ordered_json::parse(body, nullptr, false) : nlohmann::ordered_json();
  const bool valid = j.is_object() && j.contains("name") && j["name"].is_string();
  std::string arguments;
  if (begun_ && args_start_ != std::string::npos) {
    // The object's own text: up to the block's closing '}' (valid JSON ends with one).
    size_t end = body.size();
    while (end > args_start_ && IsSpace(body[end - 1])) --end;
    if (valid && end > args_start_ && body[end - 1] == '}') --end;
    while (end > args_start_ && IsSpace(body[end - 1])) --end;
    arguments = body.substr(args_start_, std::max(end - args_start_, streamed_));
  } else if (valid) {
    const auto args = j.find("arguments");
    if (args == j.end() || args->is_null()) arguments = "{}";
    else if (args->is_string()) arguments = args->get<std::string>();
    else arguments = args->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  if (!begun_ && !valid) {
    out.content += std::string(kToolOpen) + body + (complete ? std::string(kToolClose) : "");
  } else {
    if (!begun_) {
      id_ = "chatcmpl-tool-" + RandomHex(32);
      name_ = j["name"].get<std::string>();
      Emit(out, true, arguments);
    } else if (arguments.size() > streamed_) {
      Emit(out, false, arguments.substr(streamed_));
    }
    out.calls.push_back({id_, name_, arguments});
    ++num_calls_;
  }
  begun_ = scan_done_ = false;
  id_.clear();
  name_.clear();
  name_end_ = streamed_ = 0;
  args_start_ = std::string::npos;
}

ToolDelta HermesToolParser::Push(std::string_view text) {
  ToolDelta out;
  held_.append(text);
  for (;;) {
    if (state_ == State::kInCall) {
      const size_t end = held_.find(kToolClose);
      if (end == std::string::npos) {
        ScanCall(std::string_view(held_).substr(0, held_.size() - PartialTagSuffix(held_, kToolClose)), out);
        return out;
      }
      CloseCall(held_.substr(0, end), true, out);
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
  else if (state_ == State::kInCall) CloseCall(held_, false, out);  // unterminated block
  held_.clear();
  return out;
}

ToolDelta GuidedToolParser::Push(std::string_view text) {
  ToolDelta out;
  if (!required_) {
    if (text.empty() && begun_) return out;
    ToolCallUpdate u;
    u.index = 0;
    u.begin = !begun_;
    if (u.begin) {
      id_ = "chatcmpl-tool-" + RandomHex(32);
      u.id = id_, u.name = name_;
      begun_ = true;
    }
    u.arguments = std::string(text);
    out.updates.push_back(std::move(u));
    return out;
  }
  for (char ch : text) {
    if (depth_ >= 2) object_ += ch;
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (ch == '\\') escaped_ = true;
      else if (ch == '"') in_string_ = false;
      continue;
    }
    if (ch == '"') {
      in_string_ = true;
    } else if (ch == '{' || ch == '[') {
      if (++depth_ == 2) object_ = std::string(1, ch);
    } else if (ch == '}' || ch == ']') {
      if (depth_ == 2 && ch == '}') EmitObject(out);
      --depth_;
    }
  }
  return out;
}

void GuidedToolParser::EmitObject(ToolDelta& out) {
  const nlohmann::json call = nlohmann::json::parse(object_, nullptr, false);
  object_.clear();
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) return;
  ToolCallUpdate u;
  u.index = num_calls_++;
  u.begin = true;
  u.id = "chatcmpl-tool-" + RandomHex(32);
  u.name = call["name"].get<std::string>();
  u.arguments = call.contains("parameters") ? call["parameters"].dump() : "{}";
  out.calls.push_back({u.id, u.name, u.arguments});
  out.updates.push_back(std::move(u));
}

ToolDelta GuidedToolParser::Finish() {
  // named: a call even when nothing was generated (its arguments are then empty).
  if (!required_ && !begun_) return Push("");
  return {};
}

}  // namespace vtllm::server
