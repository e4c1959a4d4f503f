// Fields shared by both endpoints, /v1/completions and /tokenize. Ranges and messages follow
// vLLM's protocol.py and SamplingParams checks.
#include "server/protocol.h"

#include <algorithm>

#include "server/error.h"

namespace vtllm::server {

namespace {

std::string Num(double v) {
  std::string s = Json(v).dump();
  return s;
}

int32_t CheckTokenId(int64_t id, const ProtocolContext& ctx, const std::string& param) {
  if (id < 0 || (ctx.vocab_size > 0 && id >= ctx.vocab_size))
    throw BadRequest(param, "Token id " + std::to_string(id) + " in '" + param + "' is out of vocabulary (size " +
                                std::to_string(ctx.vocab_size) + ").");
  return static_cast<int32_t>(id);
}

const Tokenizer& NeedTokenizer(const ProtocolContext& ctx, const std::string& param) {
  if (!ctx.tokenizer)
    throw BadRequest(param, "This model has no tokenizer: send prompts as token ids.");
  return *ctx.tokenizer;
}

// A token-id list (one prompt) from a JSON array of integers.
std::vector<int32_t> TokenIds(const Json& arr, const ProtocolContext& ctx, const std::string& param) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (const Json& e : arr) {
    std::optional<int64_t> i = AsInt(e);
    if (!i) throw BadRequest(param, "'" + param + "' must be a string, a list of strings, a list of token ids or a "
                                    "list of token-id lists, got an element " + Describe(e));
    ids.push_back(CheckTokenId(*i, ctx, param));
  }
  return ids;
}

}  // namespace

std::string ResolveModel(const Json& body, const ProtocolContext& ctx) {
  std::optional<std::string> model = GetString(body, "model");
  if (!model || model->empty()) return ctx.served_model_names.empty() ? "" : ctx.served_model_names.front();
  for (const std::string& n : ctx.served_model_names)
    if (n == *model) return n;
  throw NotFound("model", "The model `" + *model + "` does not exist.");
}

void ParseSamplingFields(const Json& body, const ProtocolContext& ctx, ParsedRequest& req) {
  engine::SamplingParams& p = req.params;
  if (auto n = GetInt(body, "n")) {
    if (*n < 1) throw BadRequest("n", "n must be at least 1, got " + std::to_string(*n) + ".");
    if (*n > ctx.max_n) throw BadRequest("n", "n must be at most " + std::to_string(ctx.max_n) + ", got " + std::to_string(*n) + ".");
    p.n = static_cast<int>(*n);
  }
  if (auto t = GetNumber(body, "temperature")) {
    if (*t < 0) throw BadRequest("temperature", "temperature must be non-negative, got " + Num(*t) + ".");
    p.temperature = *t;
  }
  if (auto t = GetNumber(body, "top_p")) {
    if (!(*t > 0 && *t <= 1)) throw BadRequest("top_p", "top_p must be in (0, 1], got " + Num(*t) + ".");
    p.top_p = *t;
  }
  if (auto k = GetInt(body, "top_k")) {
    if (*k < -1) throw BadRequest("top_k", "top_k must be -1 (disable), 0 (disable) or at least 1, got " + std::to_string(*k) + ".");
    p.top_k = static_cast<int>(std::min<int64_t>(*k, INT32_MAX));
  }
  if (auto m = GetNumber(body, "min_p")) {
    if (*m < 0 || *m > 1) throw BadRequest("min_p", "min_p must be in [0, 1], got " + Num(*m) + ".");
    p.min_p = *m;
  }
  for (const char* name : {"presence_penalty", "frequency_penalty"}) {
    if (auto v = GetNumber(body, name)) {
      if (*v < -2 || *v > 2) throw BadRequest(name, std::string(name) + " must be in [-2, 2], got " + Num(*v) + ".");
      (std::string(name) == "presence_penalty" ? p.presence_penalty : p.frequency_penalty) = *v;
    }
  }
  if (auto r = GetNumber(body, "repetition_penalty")) {
    if (*r <= 0) throw BadRequest("repetition_penalty", "repetition_penalty must be greater than zero, got " + Num(*r) + ".");
    p.repetition_penalty = *r;
  }
  if (auto s = GetInt(body, "seed")) p.seed = static_cast<uint64_t>(*s);
  if (auto stop = GetStringOrList(body, "stop")) {
    for (const std::string& s : *stop)
      if (s.empty()) throw BadRequest("stop", "stop strings must not be empty.");
    p.stop = *stop;
  }
  if (auto ids = GetIntList(body, "stop_token_ids")) {
    p.stop_token_ids.clear();
    for (int64_t id : *ids) p.stop_token_ids.push_back(CheckTokenId(id, ctx, "stop_token_ids"));
  }
  if (auto b = GetBool(body, "ignore_eos")) p.ignore_eos = *b;
  if (auto m = GetInt(body, "min_tokens")) {
    if (*m < 0) throw BadRequest("min_tokens", "min_tokens must be greater than or equal to 0, got " + std::to_string(*m) + ".");
    p.min_tokens = *m;
  }
  if (auto b = GetBool(body, "include_stop_str_in_output")) p.include_stop_str_in_output = *b;
  if (auto b = GetBool(body, "skip_special_tokens")) p.skip_special_tokens = *b;
  if (auto b = GetBool(body, "spaces_between_special_tokens")) p.spaces_between_special_tokens = *b;
  if (const Json* bias = GetObject(body, "logit_bias")) {
    p.logit_bias.clear();
    for (auto it = bias->begin(); it != bias->end(); ++it) {
      int64_t id = -1;
      const std::string& key = it.key();
      size_t pos = 0;
      try {
        id = std::stoll(key, &pos);
      } catch (const std::exception&) {
        pos = 0;
      }
      if (key.empty() || pos != key.size())
        throw BadRequest("logit_bias", "logit_bias keys must be token ids, got \"" + key + "\".");
      if (!it.value().is_number())
        throw BadRequest("logit_bias", "logit_bias values must be numbers, got " + Describe(it.value()));
      const double v = std::clamp(it.value().get<double>(), -100.0, 100.0);
      p.logit_bias[CheckTokenId(id, ctx, "logit_bias")] = static_cast<float>(v);
    }
  }
  if (auto ids = GetIntList(body, "allowed_token_ids")) {
    p.allowed_token_ids.clear();
    for (int64_t id : *ids) p.allowed_token_ids.push_back(CheckTokenId(id, ctx, "allowed_token_ids"));
    if (p.allowed_token_ids.empty()) throw BadRequest("allowed_token_ids", "allowed_token_ids must not be empty.");
  }
  if (auto words = GetStringOrList(body, "bad_words")) p.bad_words = *words;
  if (auto pl = GetInt(body, "prompt_logprobs")) {
    if (*pl < 0 || *pl > ctx.max_logprobs)
      throw BadRequest("prompt_logprobs", "prompt_logprobs must be in [0, " + std::to_string(ctx.max_logprobs) + "], got " + std::to_string(*pl) + ".");
    p.prompt_logprobs = static_cast<int>(*pl);
    req.return_prompt_logprobs = true;
  }

  if (auto pr = GetInt(body, "priority")) {
    if (*pr != 0 && !ctx.priority_scheduling)
      throw BadRequest("priority", "Priority scheduling is not enabled (start the server with --scheduling-policy priority).");
    req.priority = static_cast<int>(std::clamp<int64_t>(*pr, INT32_MIN, INT32_MAX));
  }
  if (const Json* salt = Field(body, "cache_salt")) {
    if (!salt->is_string() || salt->get<std::string>().empty())
      throw BadRequest("cache_salt", "Parameter 'cache_salt' must be a non-empty string if provided.");
    req.cache_salt = salt->get<std::string>();
  }

  req.stream = GetBool(body, "stream").value_or(false);
  if (const Json* so = GetObject(body, "stream_options")) {
    if (!req.stream) throw BadRequest("stream_options", "Stream options can only be defined when `stream=True`.");
    req.include_usage = GetBool(*so, "include_usage").value_or(false);
    req.continuous_usage_stats = GetBool(*so, "continuous_usage_stats").value_or(false);
  }
  ParseStructuredOutputs(body, req);
}

void CheckContextLength(ParsedRequest& req, const ProtocolContext& ctx) {
  if (req.prompts.size() * static_cast<size_t>(req.params.n) > kMaxChoices)
    throw BadRequest("n", "A request may ask for at most " + std::to_string(kMaxChoices) + " completions (prompts * n), got " +
                              std::to_string(req.prompts.size() * static_cast<size_t>(req.params.n)) + ".");
  const std::optional<int64_t>& max_tokens = req.params.max_tokens;
  for (const std::vector<int32_t>& prompt : req.prompts) {
    const int64_t n = static_cast<int64_t>(prompt.size());
    if (n == 0) throw BadRequest(req.endpoint == Endpoint::kChat ? "messages" : "prompt", "The prompt cannot be empty.");
    if (ctx.max_model_len <= 0) continue;
    if (n >= ctx.max_model_len)
      throw BadRequest(req.endpoint == Endpoint::kChat ? "messages" : "prompt",
                       "This model's maximum context length is " + std::to_string(ctx.max_model_len) +
                           " tokens. However, your request has " + std::to_string(n) +
                           " input tokens. Please reduce the length of the input messages.");
    if (max_tokens && n + *max_tokens > ctx.max_model_len)
      throw BadRequest("max_tokens", "'max_tokens' or 'max_completion_tokens' is too large: " + std::to_string(*max_tokens) +
                                         ". This model's maximum context length is " + std::to_string(ctx.max_model_len) +
                                         " tokens and your request has " + std::to_string(n) + " input tokens (" +
                                         std::to_string(*max_tokens) + " > " + std::to_string(ctx.max_model_len) +
                                         " - " + std::to_string(n) + ").");
  }
  if (req.params.min_tokens > 0 && max_tokens && req.params.min_tokens > *max_tokens)
    throw BadRequest("min_tokens", "min_tokens must be less than or equal to max_tokens=" + std::to_string(*max_tokens) +
                                       ", got " + std::to_string(req.params.min_tokens) + ".");
}

ParsedRequest ParseCompletionRequest(const Json& body, const ProtocolContext& ctx) {
  ParsedRequest req;
  req.endpoint = Endpoint::kCompletions;
  req.model = ResolveModel(body, ctx);
  req.params = ctx.defaults;
  ParseSamplingFields(body, ctx, req);
  if (auto m = GetInt(body, "max_tokens")) {
    if (*m < 1) throw BadRequest("max_tokens", "max_tokens must be at least 1, got " + std::to_string(*m) + ".");
    req.params.max_tokens = *m;
  }
  if (const Json* lp = Field(body, "logprobs")) {
    std::optional<int64_t> k = AsInt(*lp);
    if (!k || lp->is_boolean()) throw BadRequest("logprobs", "'logprobs' must be an integer, got " + Describe(*lp));
    if (*k < 0 || *k > ctx.max_logprobs)
      throw BadRequest("logprobs", "logprobs must be in [0, " + std::to_string(ctx.max_logprobs) + "], got " + std::to_string(*k) + ".");
    req.params.logprobs = static_cast<int>(*k);
  }
  req.echo = GetBool(body, "echo").value_or(false);
  if (req.echo && req.params.logprobs) {
    // echo with logprobs reports the prompt tokens' logprobs too, as vLLM does.
    req.params.prompt_logprobs = std::max(req.params.prompt_logprobs.value_or(0), *req.params.logprobs);
    req.prompt_logprobs_to_return = *req.params.logprobs;
  }
  if (GetString(body, "suffix")) throw BadRequest("suffix", "suffix is not supported.");

  const Json* prompt = Field(body, "prompt");
  if (!prompt) throw BadRequest("prompt", "Either prompt or prompt_embeds must be provided and non-empty.");
  const bool add_special = GetBool(body, "add_special_tokens").value_or(true);
  auto add_text = [&](const std::string& text) {
    const Tokenizer& tok = NeedTokenizer(ctx, "prompt");
    req.prompts.push_back(tok.Encode(text, add_special));
    req.prompt_texts.push_back(text);
  };
  auto add_ids = [&](std::vector<int32_t> ids) {
    req.prompt_texts.push_back(ctx.tokenizer ? ctx.tokenizer->Decode(ids) : std::string());
    req.prompts.push_back(std::move(ids));
  };
  const std::string bad_prompt =
      "'prompt' must be a string, a list of strings, a list of token ids or a list of token-id lists";
  if (prompt->is_string()) {
    add_text(prompt->get<std::string>());
  } else if (prompt->is_array()) {
    if (prompt->empty()) throw BadRequest("prompt", "Either prompt or prompt_embeds must be provided and non-empty.");
    const Json& first = prompt->front();
    if ((first.is_string() || first.is_array()) && prompt->size() > kMaxPrompts)
      throw BadRequest("prompt", "At most " + std::to_string(kMaxPrompts) + " prompts per request, got " + std::to_string(prompt->size()) + ".");
    if (first.is_string()) {
      for (const Json& e : *prompt) {
        if (!e.is_string()) throw BadRequest("prompt", bad_prompt + ", got a list mixing strings and " + e.type_name());
        add_text(e.get<std::string>());
      }
    } else if (first.is_array()) {
      for (const Json& e : *prompt) {
        if (!e.is_array()) throw BadRequest("prompt", bad_prompt + ", got a list mixing lists and " + e.type_name());
        add_ids(TokenIds(e, ctx, "prompt"));
      }
    } else if (first.is_number()) {
      add_ids(TokenIds(*prompt, ctx, "prompt"));
    } else {
      throw BadRequest("prompt", bad_prompt + ", got a list of " + first.type_name());
    }
  } else {
    throw BadRequest("prompt", bad_prompt + ", got " + Describe(*prompt));
  }
  CheckContextLength(req, ctx);
  return req;
}

TokenizeResult ParseTokenizeRequest(const Json& body, const ProtocolContext& ctx) {
  (void)ResolveModel(body, ctx);
  TokenizeResult r;
  const Tokenizer& tok = NeedTokenizer(ctx, "prompt");
  if (Field(body, "messages")) {
    RenderedChat chat = RenderChat(body, ctx);
    r.tokens = tok.Encode(chat.text, GetBool(body, "add_special_tokens").value_or(false));
    r.rendered = std::move(chat.text);
    return r;
  }
  std::optional<std::string> prompt = GetString(body, "prompt");
  if (!prompt) throw BadRequest("prompt", "'prompt' (a string) or 'messages' is required.");
  r.tokens = tok.Encode(*prompt, GetBool(body, "add_special_tokens").value_or(true));
  return r;
}

std::vector<int32_t> ParseDetokenizeRequest(const Json& body, const ProtocolContext& ctx) {
  (void)ResolveModel(body, ctx);
  NeedTokenizer(ctx, "tokens");
  std::optional<std::vector<int64_t>> ids = GetIntList(body, "tokens");
  if (!ids) throw BadRequest("tokens", "'tokens' (a list of token ids) is required.");
  std::vector<int32_t> out;
  for (int64_t id : *ids) out.push_back(CheckTokenId(id, ctx, "tokens"));
  return out;
}

}  // namespace vtllm::server
