#include "server/response.h"

#include <cmath>
#include <cstdint>

namespace vtllm::server {

namespace {
// vLLM reports impossible tokens' logprobs as -9999.0 rather than -inf (JSON has no infinity).
double SafeLogprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

// Length in code points, as vLLM's text_offset counts Python characters.
size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// OpenAI's names (the engine's FinishReasonName gives the same; kept here so formatting needs
// nothing of the engine but its data types).
const char* ReasonName(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kStop: return "stop";
    case engine::FinishReason::kLength: return "length";
    case engine::FinishReason::kAbort: return "abort";
  }
  return "stop";
}

Json Bytes(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}
}  // namespace

std::string NewResponseId(Endpoint endpoint) {
  return std::string(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + RandomHex(32);
}

struct ResponseBuilder::Choice {
  int index = 0;
  std::string text;  // generated text as the engine gave it
  std::vector<int32_t> token_ids;
  std::vector<engine::PositionLogprobs> logprobs;
  std::optional<engine::FinishReason> finish;
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  int64_t num_generated = 0;
  // chat: the parsers' state and what they produced
  ReasoningParser reasoning;
  HermesToolParser tools;
  std::optional<GuidedToolParser> guided;  // tool_choice required / named
  std::string reasoning_text, content_text;
  std::vector<ToolCall> calls;
  std::vector<size_t> call_slot;  // the parser's call index -> index in `calls` (SIZE_MAX: dropped)
  bool started = false;      // the echo (if any) was emitted
  size_t text_offset = 0;    // completions logprobs: code points emitted so far
};

struct ResponseBuilder::Prompt {
  int64_t num_prompt_tokens = 0, num_cached_tokens = 0;
  std::optional<std::vector<engine::PositionLogprobs>> prompt_logprobs;
  bool finished = false;
};

ResponseBuilder::ResponseBuilder(const ParsedRequest& req, ResponseMeta meta) : req_(req), meta_(std::move(meta)) {
  prompts_.resize(req.prompts.size());
  for (size_t i = 0; i < req.prompts.size(); ++i) prompts_[i].num_prompt_tokens = static_cast<int64_t>(req.prompts[i].size());
  const int n = req.params.n;
  for (size_t i = 0; i < req.prompts.size() * static_cast<size_t>(n); ++i) {
    auto c = std::make_unique<Choice>();
    c->index = static_cast<int>(i);
    c->reasoning = ReasoningParser(req.prompt_opens_reasoning);
    if (req.guided_tools) c->guided.emplace(req.tool_choice == ToolChoice::kRequired, req.named_tool);
    choices_.push_back(std::move(c));
  }
}

ResponseBuilder::~ResponseBuilder() = default;

ResponseBuilder::Choice& ResponseBuilder::ChoiceAt(size_t prompt_index, int child) {
  const size_t n = static_cast<size_t>(req_.params.n);
  if (child < 0 || static_cast<size_t>(child) >= n || prompt_index >= prompts_.size())
    throw std::out_of_range("ResponseBuilder: output for a choice that does not exist");
  return *choices_[prompt_index * n + static_cast<size_t>(child)];
}

bool ResponseBuilder::finished() const {
  for (const Prompt& p : prompts_)
    if (!p.finished) return false;
  return true;
}

std::string ResponseBuilder::TokenText(int32_t id) const {
  if (!meta_.tokenizer) return "token_id:" + std::to_string(id);
  const int32_t one[1] = {id};
  return meta_.tokenizer->Decode(one);
}

Json ResponseBuilder::ChunkBase() const {
  Json j;
  j["id"] = meta_.id;
  j["object"] = req_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
  j["created"] = meta_.created;
  j["model"] = meta_.model;
  j["choices"] = Json::array();
  return j;
}

Json ResponseBuilder::Usage() const {
  int64_t prompt = 0, cached = 0, completion = 0;
  for (const Prompt& p : prompts_) {
    prompt += p.num_prompt_tokens;
    cached += p.num_cached_tokens;
  }
  for (const auto& c : choices_) completion += c->num_generated;
  Json u;
  u["prompt_tokens"] = prompt;
  u["total_tokens"] = prompt + completion;
  u["completion_tokens"] = completion;
  u["prompt_tokens_details"] = {{"cached_tokens", cached}};
  return u;
}

Json ResponseBuilder::StopReason(const Choice& c) const {
  if (c.stop_string) return *c.stop_string;
  // The tokenizer's own EOS is the ordinary end, reported as null as vLLM does.
  if (c.stop_token_id && !(meta_.tokenizer && meta_.tokenizer->eos_token_id() == *c.stop_token_id))
    return *c.stop_token_id;
  return nullptr;
}

std::string ResponseBuilder::FinishReason(const Choice& c) const {
  // A named tool choice finishes as the generation did ("stop"), as vLLM reports it.
  if (*c.finish != engine::FinishReason::kAbort && !c.calls.empty() && req_.tool_choice != ToolChoice::kNamed)
    return "tool_calls";
  return ReasonName(*c.finish);
}

Json ResponseBuilder::CompletionLogprobs(const std::vector<engine::PositionLogprobs>& lps,
                                         const std::vector<int32_t>& ids, size_t& text_offset,
                                         bool first_is_null) const {
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(), offsets = Json::array();
  // lps is aligned with ids, or (first_is_null: prompt logprobs) with ids[1..].
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string text = TokenText(ids[i]);
    tokens.push_back(text);
    offsets.push_back(text_offset);
    text_offset += CodePoints(text);
    const size_t li = first_is_null ? i - 1 : i;
    if ((first_is_null && i == 0) || li >= lps.size()) {
      token_lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    const engine::PositionLogprobs& p = lps[li];
    token_lps.push_back(SafeLogprob(p.chosen.logprob));
    Json top = Json::object();
    for (const engine::TokenLogprob& t : p.top) top[TokenText(t.token_id)] = SafeLogprob(t.logprob);
    top[text] = SafeLogprob(p.chosen.logprob);
    tops.push_back(std::move(top));
  }
  Json j;
  j["text_offset"] = std::move(offsets);
  j["token_logprobs"] = std::move(token_lps);
  j["tokens"] = std::move(tokens);
  j["top_logprobs"] = std::move(tops);
  return j;
}

Json ResponseBuilder::ChatLogprobs(const std::vector<engine::PositionLogprobs>& lps) const {
  Json content = Json::array();
  for (const engine::PositionLogprobs& p : lps) {
    const std::string text = TokenText(p.chosen.token_id);
    Json e;
    e["token"] = text;
    e["logprob"] = SafeLogprob(p.chosen.logprob);
    e["bytes"] = Bytes(text);
    Json top = Json::array();
    for (const engine::TokenLogprob& t : p.top) {
      const std::string tt = TokenText(t.token_id);
      top.push_back({{"token", tt}, {"logprob", SafeLogprob(t.logprob)}, {"bytes", Bytes(tt)}});
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", std::move(content)}};
}

// vLLM's prompt_logprobs: null for the first position, then {token id: {logprob, rank,
// decoded_token}} with the prompt's own token and the top ones.
Json ResponseBuilder::PromptLogprobs(const Prompt& p) const {
  Json out = Json::array();
  out.push_back(nullptr);
  if (!p.prompt_logprobs) return out;
  for (const engine::PositionLogprobs& pos : *p.prompt_logprobs) {
    Json entry = Json::object();
    auto add = [&](const engine::TokenLogprob& t) {
      entry[std::to_string(t.token_id)] = {{"logprob", SafeLogprob(t.logprob)}, {"rank", t.rank}, {"decoded_token", TokenText(t.token_id)}};
    };
    add(pos.chosen);
    for (const engine::TokenLogprob& t : pos.top) add(t);
    out.push_back(std::move(entry));
  }
  return out;
}

void ResponseBuilder::Parse(Choice& c, const std::string& text, bool final, Json& delta) {
  std::string reasoning, content = text;
  if (req_.parse_reasoning) {
    ReasoningDelta r = c.reasoning.Push(text);
    if (final) {
      ReasoningDelta f = c.reasoning.Finish();
      r.reasoning += f.reasoning;
      r.content += f.content;
    }
    reasoning = std::move(r.reasoning);
    content = std::move(r.content);
  }
  std::vector<ToolCallUpdate> updates;
  if (c.guided) {  // the whole output is the call(s)
    ToolDelta t = c.guided->Push(content);
    if (final) {
      ToolDelta f = c.guided->Finish();
      for (ToolCallUpdate& u : f.updates) t.updates.push_back(std::move(u));
    }
    content.clear();
    updates = std::move(t.updates);
  } else if (req_.parse_tools) {
    ToolDelta t = c.tools.Push(content);
    if (final) {
      ToolDelta f = c.tools.Finish();
      t.content += f.content;
      for (ToolCallUpdate& u : f.updates) t.updates.push_back(std::move(u));
    }
    content = std::move(t.content);
    updates = std::move(t.updates);
  }
  c.reasoning_text += reasoning;
  c.content_text += content;
  if (!reasoning.empty()) delta["reasoning"] = reasoning;
  if (!content.empty()) delta["content"] = content;
  // Calls stream by the parser's updates in both modes, so the streamed fragments and the
  // message's arguments are the same text. A named tool_choice keeps that tool's calls only.
  Json list = Json::array();
  size_t last_parser_index = SIZE_MAX;
  for (ToolCallUpdate& u : updates) {
    if (u.begin) {
      const bool keep = req_.tool_choice != ToolChoice::kNamed || u.name == req_.named_tool;
      c.call_slot.resize(u.index + 1, SIZE_MAX);
      if (!keep) continue;
      c.call_slot[u.index] = c.calls.size();
      c.calls.push_back({u.id, u.name, ""});
    }
    if (u.index >= c.call_slot.size() || c.call_slot[u.index] == SIZE_MAX) continue;
    const size_t slot = c.call_slot[u.index];
    c.calls[slot].arguments += u.arguments;
    if (u.index == last_parser_index && !list.empty()) {  // one entry per call per chunk
      Json& fn = list.back()["function"];
      fn["arguments"] = fn["arguments"].get<std::string>() + u.arguments;
      continue;
    }
    last_parser_index = u.index;
    if (u.begin)
      list.push_back({{"index", slot},
                      {"id", u.id},
                      {"type", "function"},
                      {"function", {{"name", u.name}, {"arguments", u.arguments}}}});
    else
      list.push_back({{"index", slot}, {"function", {{"arguments", u.arguments}}}});
  }
  if (!list.empty()) delta["tool_calls"] = std::move(list);
}

std::vector<Json> ResponseBuilder::Start() {
  std::vector<Json> chunks;
  if (req_.endpoint != Endpoint::kChat) return chunks;
  for (const auto& c : choices_) {
    Json chunk = ChunkBase();
    chunk["choices"].push_back(
        {{"index", c->index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

std::vector<Json> ResponseBuilder::Add(size_t prompt_index, const engine::RequestOutput& out) {
  std::vector<Json> chunks;
  if (prompt_index >= prompts_.size()) throw std::out_of_range("ResponseBuilder: output for an unknown prompt");
  Prompt& p = prompts_[prompt_index];
  if (out.num_prompt_tokens > 0) p.num_prompt_tokens = out.num_prompt_tokens;
  p.num_cached_tokens = std::max(p.num_cached_tokens, out.num_cached_tokens);
  if (out.prompt_logprobs) p.prompt_logprobs = out.prompt_logprobs;
  if (out.finished) p.finished = true;
  if (out.error) {
    if (!error_) error_ = *out.error;
    p.finished = true;
    return chunks;
  }
  for (const engine::CompletionDelta& d : out.completions) {
    Choice& c = ChoiceAt(prompt_index, d.index);
    c.text += d.text;
    c.token_ids.insert(c.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
    c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    c.num_generated = std::max<int64_t>(d.num_generated, static_cast<int64_t>(c.token_ids.size()));
    if (d.finish_reason) {
      c.finish = d.finish_reason;
      c.stop_string = d.stop_string;
      c.stop_token_id = d.stop_token_id;
    }
    const bool first = !c.started;
    c.started = true;
    Json choice;
    choice["index"] = c.index;
    if (req_.endpoint == Endpoint::kCompletions) {
      std::string text = d.text;
      Json logprobs = nullptr;
      if (first && req_.echo) text = req_.prompt_texts[prompt_index] + text;
      if (req_.params.logprobs) {
        logprobs = CompletionLogprobs(d.logprobs, d.token_ids, c.text_offset, false);
        if (first && req_.echo) {
          size_t offset = 0;
          static const std::vector<engine::PositionLogprobs> kNone;
          Json prompt_part = CompletionLogprobs(p.prompt_logprobs ? *p.prompt_logprobs : kNone,
                                                req_.prompts[prompt_index], offset, true);
          for (Json& off : logprobs["text_offset"]) off = off.get<size_t>() + offset;
          c.text_offset += offset;
          for (const char* key : {"text_offset", "token_logprobs", "tokens", "top_logprobs"})
            for (Json& v : logprobs[key]) prompt_part[key].push_back(std::move(v));
          logprobs = std::move(prompt_part);
        }
      }
      if (text.empty() && !d.finish_reason && d.token_ids.empty()) continue;
      choice["text"] = std::move(text);
      choice["logprobs"] = std::move(logprobs);
    } else {
      Json delta = Json::object();
      if (first && !req_.echo_text.empty()) {
        c.content_text += req_.echo_text;
        delta["content"] = req_.echo_text;
      }
      Json parsed = Json::object();
      Parse(c, d.text, d.finish_reason.has_value(), parsed);
      for (auto it = parsed.begin(); it != parsed.end(); ++it) {
        if (it.key() == "content" && delta.contains("content")) delta["content"] = delta["content"].get<std::string>() + it.value().get<std::string>();
        else delta[it.key()] = it.value();
      }
      if (delta.empty() && !d.finish_reason && d.logprobs.empty()) continue;
      choice["delta"] = std::move(delta);
      choice["logprobs"] = req_.params.logprobs ? ChatLogprobs(d.logprobs) : Json(nullptr);
    }
    choice["finish_reason"] = c.finish ? Json(FinishReason(c)) : Json(nullptr);
    choice["stop_reason"] = c.finish ? StopReason(c) : Json(nullptr);
    if (!req_.stream) continue;
    Json chunk = ChunkBase();
    chunk["choices"].push_back(std::move(choice));
    if (req_.continuous_usage_stats) chunk["usage"] = Usage();
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

std::vector<Json> ResponseBuilder::End() {
  std::vector<Json> chunks;
  if (req_.include_usage) {
    Json chunk = ChunkBase();
    chunk["usage"] = Usage();
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

Json ResponseBuilder::Response() const {
  Json j;
  j["id"] = meta_.id;
  j["object"] = req_.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion";
  j["created"] = meta_.created;
  j["model"] = meta_.model;
  Json choices = Json::array();
  const size_t n = static_cast<size_t>(req_.params.n);
  for (const auto& cp : choices_) {
    const Choice& c = *cp;
    const size_t prompt_index = static_cast<size_t>(c.index) / n;
    const Prompt& p = prompts_[prompt_index];
    Json choice;
    choice["index"] = c.index;
    if (req_.endpoint == Endpoint::kCompletions) {
      choice["text"] = (req_.echo ? req_.prompt_texts[prompt_index] : std::string()) + c.text;
      Json logprobs = nullptr;
      if (req_.params.logprobs) {
        size_t offset = 0;
        logprobs = CompletionLogprobs(c.logprobs, c.token_ids, offset, false);
        if (req_.echo) {
          size_t poff = 0;
          static const std::vector<engine::PositionLogprobs> kNone;
          Json all = CompletionLogprobs(p.prompt_logprobs ? *p.prompt_logprobs : kNone, req_.prompts[prompt_index], poff, true);
          for (Json& off : logprobs["text_offset"]) off = off.get<size_t>() + poff;
          for (const char* key : {"text_offset", "token_logprobs", "tokens", "top_logprobs"})
            for (Json& v : logprobs[key]) all[key].push_back(std::move(v));
          logprobs = std::move(all);
        }
      }
      choice["logprobs"] = std::move(logprobs);
      if (req_.return_prompt_logprobs) choice["prompt_logprobs"] = PromptLogprobs(p);
    } else {
      const bool nullable = req_.parse_reasoning || !c.calls.empty();
      Json message;
      message["role"] = "assistant";
      message["content"] = nullable && c.content_text.empty() && !c.guided ? Json(nullptr) : Json(c.content_text);
      if (req_.parse_reasoning) message["reasoning"] = c.reasoning_text.empty() ? Json(nullptr) : Json(c.reasoning_text);
      Json calls = Json::array();
      for (const ToolCall& call : c.calls)
        calls.push_back({{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
      message["tool_calls"] = std::move(calls);
      choice["message"] = std::move(message);
      choice["logprobs"] = req_.params.logprobs ? ChatLogprobs(c.logprobs) : Json(nullptr);
    }
    choice["finish_reason"] = c.finish ? Json(FinishReason(c)) : Json(nullptr);
    choice["stop_reason"] = c.finish ? StopReason(c) : Json(nullptr);
    choices.push_back(std::move(choice));
  }
  j["choices"] = std::move(choices);
  j["usage"] = Usage();
  if (req_.endpoint == Endpoint::kChat && req_.return_prompt_logprobs && !prompts_.empty())
    j["prompt_logprobs"] = PromptLogprobs(prompts_.front());
  return j;
}

}  // namespace vtllm::server
