#include "engine/request_validation.h"

#include "engine/structured_output.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace vtllm::engine {

namespace {

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void Require(bool ok, const char* field, const std::string& message) {
  if (!ok) throw RequestError(field, message);
}

}  // namespace

void RequestValidator::Validate(const EngineRequest& r) const {
  const SamplingParams& p = r.params;
  const int64_t P = static_cast<int64_t>(r.prompt_token_ids.size());
  Require(P > 0, "prompt", "the prompt is empty: give at least one token");
  for (size_t i = 0; i < r.prompt_token_ids.size(); ++i) {
    const int32_t t = r.prompt_token_ids[i];
    Require(t >= 0 && t < vocab_size, "prompt",
            "prompt token " + std::to_string(i) + " is " + std::to_string(t) + ", outside the vocabulary [0, " +
                std::to_string(vocab_size) + ")");
  }
  // max_tokens 0 with prompt_logprobs scores the prompt alone (nothing is generated), so the
  // prompt may then fill the whole context.
  const bool score_only = p.max_tokens && *p.max_tokens == 0 && p.prompt_logprobs.has_value();
  if (P > max_model_len || (P == max_model_len && !score_only))
    throw RequestError("messages", "This model's maximum context length is " + std::to_string(max_model_len) +
                                       " tokens. However, your request has " + std::to_string(P) +
                                       " input tokens. Please reduce the length of the input messages.");
  if (p.max_tokens) {
    Require(*p.max_tokens >= 1 || score_only, "max_tokens",
            "max_tokens must be at least 1, got " + std::to_string(*p.max_tokens) +
                (*p.max_tokens == 0 ? " (0 only scores the prompt, with prompt_logprobs)" : ""));
    if (P + *p.max_tokens > max_model_len)
      throw RequestError("max_tokens", "This model's maximum context length is " + std::to_string(max_model_len) +
                                           " tokens. However, you requested " + std::to_string(P + *p.max_tokens) +
                                           " tokens (" + std::to_string(P) + " in the messages, " +
                                           std::to_string(*p.max_tokens) +
                                           " in the completion). Please reduce the length of the messages or "
                                           "completion.");
  }
  if (p.structured.enabled()) {
    Require(tokenizer != nullptr, p.structured.field.c_str(),
            "structured outputs need the model's tokenizer, and this engine has none");
    if (p.structured.kind == StructuredOutputParams::Kind::kJsonSchema)
      (void)JsonGrammar::FromSchema(p.structured.json_schema, p.structured.field);
  }
  Require(p.n >= 1 && p.n <= max_n, "n", "n must be in [1, " + std::to_string(max_n) + "], got " + std::to_string(p.n));
  Require(std::isfinite(p.temperature) && p.temperature >= 0, "temperature",
          "temperature must be non-negative, got " + Num(p.temperature));
  Require(std::isfinite(p.top_p) && p.top_p > 0 && p.top_p <= 1, "top_p", "top_p must be in (0, 1], got " + Num(p.top_p));
  Require(p.top_k >= -1, "top_k", "top_k must be -1 (disable), or at least 1, got " + std::to_string(p.top_k));
  Require(std::isfinite(p.min_p) && p.min_p >= 0 && p.min_p <= 1, "min_p", "min_p must be in [0, 1], got " + Num(p.min_p));
  Require(std::isfinite(p.presence_penalty) && p.presence_penalty >= -2 && p.presence_penalty <= 2, "presence_penalty",
          "presence_penalty must be in [-2, 2], got " + Num(p.presence_penalty));
  Require(std::isfinite(p.frequency_penalty) && p.frequency_penalty >= -2 && p.frequency_penalty <= 2,
          "frequency_penalty", "frequency_penalty must be in [-2, 2], got " + Num(p.frequency_penalty));
  Require(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0 && p.repetition_penalty <= 2 * 1e9,
          "repetition_penalty", "repetition_penalty must be greater than zero, got " + Num(p.repetition_penalty));
  Require(p.min_tokens >= 0, "min_tokens", "min_tokens must be non-negative, got " + std::to_string(p.min_tokens));
  if (p.max_tokens)
    Require(p.min_tokens <= *p.max_tokens, "min_tokens",
            "min_tokens must be less than or equal to max_tokens=" + std::to_string(*p.max_tokens) + ", got " +
                std::to_string(p.min_tokens));
  if (p.logprobs)
    Require(*p.logprobs >= 0 && *p.logprobs <= max_logprobs, "logprobs",
            "logprobs must be in [0, " + std::to_string(max_logprobs) + "], got " + std::to_string(*p.logprobs));
  if (p.prompt_logprobs)
    Require(*p.prompt_logprobs >= 0 && *p.prompt_logprobs <= max_logprobs, "prompt_logprobs",
            "prompt_logprobs must be in [0, " + std::to_string(max_logprobs) + "], got " +
                std::to_string(*p.prompt_logprobs));
  auto in_vocab = [&](int32_t t) { return t >= 0 && t < vocab_size; };
  for (int32_t t : p.stop_token_ids)
    Require(in_vocab(t), "stop_token_ids", "stop token id " + std::to_string(t) + " is outside the vocabulary");
  for (int32_t t : p.allowed_token_ids)
    Require(in_vocab(t), "allowed_token_ids",
            "allowed token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
  for (const auto& [t, v] : p.logit_bias) {
    Require(in_vocab(t), "logit_bias",
            "logit_bias token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    Require(std::isfinite(v), "logit_bias", "logit_bias of token " + std::to_string(t) + " is not a finite number");
  }
  for (const std::string& s : p.stop) Require(!s.empty(), "stop", "stop strings must not be empty");
  if (!tokenizer) {
    Require(p.stop.empty(), "stop", "stop strings need a tokenizer, and this model directory has none");
    Require(p.bad_words.empty(), "bad_words", "bad_words need a tokenizer, and this model directory has none");
  }
}

std::vector<std::vector<int32_t>> RequestValidator::BadWordsIds(const SamplingParams& p) const {
  std::vector<std::vector<int32_t>> out;
  if (!tokenizer) return out;
  for (const std::string& word : p.bad_words) {
    std::string bare = word;
    bare.erase(0, bare.find_first_not_of(' '));
    for (const std::string& text : {bare, " " + bare}) {
      std::vector<int32_t> ids = tokenizer->Encode(text, /*add_special_tokens=*/false);
      if (ids.empty() || std::find(out.begin(), out.end(), ids) != out.end()) continue;
      out.push_back(std::move(ids));
    }
  }
  return out;
}

}  // namespace vtllm::engine
