#include "engine/output_processor.h"

#include <algorithm>

namespace vtllm::engine {

namespace {

// The end of `text` held back as a possible stop-string start, moved back to a UTF-8 boundary.
size_t SendableBytes(const std::string& text, size_t hold) {
  size_t end = text.size() > hold ? text.size() - hold : 0;
  while (end > 0 && end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return end;
}

void CheckStopStrings(Request& req, size_t new_from) {
  const SamplingParams& p = req.params;
  if (p.stop.empty()) return;
  // A match must end in the new text: start looking max_stop_len - 1 bytes before it.
  const size_t from = new_from > req.max_stop_len ? new_from - req.max_stop_len + 1 : 0;
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const std::string& s : p.stop) {
    if (s.empty()) continue;
    const size_t at = req.text.find(s, from);
    if (at != std::string::npos && at < best) {
      best = at;
      which = &s;
    }
  }
  if (which == nullptr) return;
  req.finish_reason = FinishReason::kStop;
  req.stop_string = *which;
  req.stop_token_id.reset();
  req.text.resize(p.include_stop_str_in_output ? best + which->size() : best);
  req.text_sent = std::min(req.text_sent, req.text.size());
}

}  // namespace

void AppendToken(Request& req, int32_t token, std::optional<PositionLogprobs> logprobs,
                 const std::set<int32_t>& eos_ids, int64_t max_model_len) {
  req.all_tokens.push_back(token);
  if (req.params.logprobs) req.pending_logprobs.push_back(logprobs.value_or(PositionLogprobs{}));
  const SamplingParams& p = req.params;
  const int64_t generated = req.num_output_tokens();
  bool by_token = false;
  if (req.num_tokens() >= max_model_len || generated >= req.max_tokens) req.finish_reason = FinishReason::kLength;
  if (generated >= p.min_tokens) {
    if (!p.ignore_eos && eos_ids.count(token)) {
      req.finish_reason = FinishReason::kStop;  // stop reason none, as vLLM reports EOS
      by_token = true;
    } else if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end()) {
      req.finish_reason = FinishReason::kStop;
      req.stop_token_id = token;
      by_token = true;
    }
  }
  if (!req.detokenizer) return;  // no tokenizer: ids only
  const size_t before = req.text.size();
  // The stopping token's text is left out unless the client asked for the stop in the output.
  if (!by_token || p.include_stop_str_in_output) req.text += req.detokenizer->Push(token);
  if (req.finish_reason) req.text += req.detokenizer->Finish();
  if (!by_token && generated >= p.min_tokens) CheckStopStrings(req, before);
}

bool HasNews(const Request& req) {
  return req.tokens_sent < static_cast<size_t>(req.num_output_tokens()) ||
         (req.finish_reason.has_value() && !req.finish_reported);
}

CompletionDelta TakeDelta(Request& req) {
  CompletionDelta d;
  d.index = req.index;
  const size_t total = static_cast<size_t>(req.num_output_tokens());
  d.token_ids.assign(req.all_tokens.begin() + req.num_prompt_tokens() + static_cast<std::ptrdiff_t>(req.tokens_sent),
                     req.all_tokens.end());
  req.tokens_sent = total;
  d.logprobs = std::move(req.pending_logprobs);
  req.pending_logprobs.clear();
  const bool done = req.finish_reason.has_value();
  const bool hold = !done && !req.params.stop.empty() && !req.params.include_stop_str_in_output;
  const size_t end = hold ? SendableBytes(req.text, req.max_stop_len - 1) : req.text.size();
  if (end > req.text_sent) {
    d.text = req.text.substr(req.text_sent, end - req.text_sent);
    req.text_sent = end;
  }
  d.finish_reason = req.finish_reason;
  if (done) req.finish_reported = true;
  d.stop_string = req.stop_string;
  d.stop_token_id = req.stop_token_id;
  d.num_generated = static_cast<int64_t>(total);
  return d;
}

}  // namespace vtllm::engine
