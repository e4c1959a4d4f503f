#include "server/serving.h"

#include <ctime>
#include <filesystem>
#include <stdexcept>

#include "server/error.h"
#include "vt/error.h"

namespace vtllm::server {

Serving::Serving(engine::AsyncEngine& engine, ServingOptions options) : engine_(engine) {
  if (!options.reasoning_parser.empty() && options.reasoning_parser != "qwen3")
    throw std::invalid_argument("--reasoning-parser: \"" + options.reasoning_parser + "\" is not one of: qwen3");
  if (!options.tool_call_parser.empty() && options.tool_call_parser != "hermes")
    throw std::invalid_argument("--tool-call-parser: \"" + options.tool_call_parser + "\" is not one of: hermes");
  if (options.enable_auto_tool_choice && options.tool_call_parser.empty())
    throw std::invalid_argument("--enable-auto-tool-choice needs --tool-call-parser");
  const engine::Engine& e = engine.engine();
  if (options.served_model_names.empty()) {
    std::string name = std::filesystem::path(e.config().model_dir).lexically_normal().filename().string();
    if (name.empty()) name = std::filesystem::path(e.config().model_dir).lexically_normal().parent_path().filename().string();
    options.served_model_names.push_back(name.empty() ? "vtllm" : name);
  }
  ctx_.served_model_names = options.served_model_names;
  if (e.tokenizer()) {
    ctx_.tokenizer = &*e.tokenizer();
    try {
      chat_template_.emplace(ChatTemplate::ForTokenizer(*e.tokenizer(), false));
      tool_chat_template_.emplace(ChatTemplate::ForTokenizer(*e.tokenizer(), true));
      ctx_.chat_template = &*chat_template_;
      ctx_.tool_chat_template = &*tool_chat_template_;
    } catch (const std::runtime_error&) {
      // No chat template: /v1/chat/completions answers 400 saying so.
    }
  }
  ctx_.defaults = e.default_params();
  ctx_.max_model_len = e.max_model_len();
  ctx_.vocab_size = e.model().vocab_size();
  ctx_.max_logprobs = e.config().max_logprobs;
  ctx_.max_n = e.config().max_n;
  ctx_.priority_scheduling = e.config().scheduling_policy == engine::SchedulingPolicy::kPriority;
  ctx_.reasoning_parser = options.reasoning_parser;
  ctx_.enable_auto_tool_choice = options.enable_auto_tool_choice;
  ctx_.tool_call_parser = options.tool_call_parser;
}

Serving::~Serving() = default;

std::unique_ptr<ParsedRequest> Serving::Parse(Endpoint endpoint, std::string_view body) const {
  return ParseJson(endpoint, ParseBody(body));
}

std::unique_ptr<ParsedRequest> Serving::ParseJson(Endpoint endpoint, const Json& body) const {
  return std::make_unique<ParsedRequest>(endpoint == Endpoint::kChat ? ParseChatRequest(body, ctx_)
                                                                      : ParseCompletionRequest(body, ctx_));
}

Generation::Generation(Serving& serving, std::unique_ptr<ParsedRequest> request)
    : engine_(serving.engine()), req_(std::move(request)) {
  meta_id_ = NewResponseId(req_->endpoint);
  ResponseMeta meta{meta_id_, static_cast<int64_t>(std::time(nullptr)), req_->model, serving.context().tokenizer};
  builder_ = std::make_unique<ResponseBuilder>(*req_, std::move(meta));
  try {
    for (size_t i = 0; i < req_->prompts.size(); ++i) {
      engine::EngineRequest er;
      er.request_id = req_->prompts.size() == 1 ? meta_id_ : meta_id_ + "-" + std::to_string(i);
      er.prompt_token_ids = req_->prompts[i];
      er.params = req_->params;
      er.priority = req_->priority;
      er.cache_salt = req_->cache_salt;
      streams_.push_back(engine_.Submit(std::move(er)));
      done_.push_back(false);
    }
  } catch (const engine::RequestError& e) {
    Abort();
    throw BadRequest(e.param(), e.what());
  } catch (const vt::Error& e) {
    Abort();
    throw ServiceUnavailable(std::string("The engine cannot take requests: ") + e.what());
  }
}

Generation::~Generation() { Abort(); }

void Generation::Abort() {
  for (size_t i = 0; i < streams_.size(); ++i)
    if (!done_[i]) engine_.Abort(streams_[i]->request_id());
}

bool Generation::Poll(std::chrono::milliseconds timeout, std::vector<Json>& chunks) {
  size_t unfinished = 0;
  bool got = false;
  // Take whatever is ready on every stream; then, if nothing was, wait on the first
  // unfinished one (with several prompts, briefly, so the others are not starved).
  for (int pass = 0; pass < 2 && !got; ++pass) {
    unfinished = 0;
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (done_[i]) continue;
      if (streams_[i]->finished()) {
        done_[i] = true;
        continue;
      }
      const bool wait = pass == 1 && unfinished == 0;
      ++unfinished;
      const std::chrono::milliseconds t =
          !wait ? std::chrono::milliseconds(0) : (streams_.size() == 1 ? timeout : std::min(timeout, std::chrono::milliseconds(5)));
      while (std::optional<engine::RequestOutput> out = streams_[i]->Next(t)) {
        got = true;
        std::vector<Json> c = builder_->Add(i, *out);
        for (Json& j : c) chunks.push_back(std::move(j));
        if (out->finished) {
          done_[i] = true;
          break;
        }
        if (wait) break;
      }
      if (streams_[i]->finished()) done_[i] = true;
    }
    if (unfinished == 0) break;
  }
  for (size_t i = 0; i < streams_.size(); ++i)
    if (!done_[i]) return false;
  return true;
}

std::vector<Json> Generation::End() {
  std::vector<Json> chunks;
  if (builder_->error()) {
    chunks.push_back(Json::parse(ErrorBody(InternalError("The engine failed this request: " + *builder_->error()))));
    return chunks;
  }
  return builder_->End();
}

std::optional<Json> Generation::Complete(const std::function<bool()>& client_gone) {
  std::vector<Json> ignored;
  while (!Poll(std::chrono::milliseconds(100), ignored)) {
    ignored.clear();
    if (client_gone && client_gone()) {
      Abort();
      return std::nullopt;
    }
  }
  if (builder_->error()) throw InternalError("The engine failed this request: " + *builder_->error());
  return builder_->Response();
}

}  // namespace vtllm::server
