// The thin layer between the OpenAI front and the engine, shared by the HTTP server and the C
// ABI: Serving holds what every request needs (the protocol context, the chat templates);
// a Generation is one OpenAI request in flight — its engine requests (one per prompt) and
// the response being built from their outputs.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "server/protocol.h"
#include "server/response.h"

namespace vtllm::server {

struct ServingOptions {
  std::vector<std::string> served_model_names;  // empty: the model directory's last component
  std::string reasoning_parser;                 // "" or "qwen3"
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;                 // "" or "hermes"
};

class Serving {
 public:
  // Throws std::invalid_argument for an unknown parser name.
  Serving(engine::AsyncEngine& engine, ServingOptions options);
  ~Serving();

  engine::AsyncEngine& engine() { return engine_; }
  const ProtocolContext& context() const { return ctx_; }
  const std::string& model_name() const { return ctx_.served_model_names.front(); }

  // Body -> validated request for `endpoint`; throws ApiError.
  std::unique_ptr<ParsedRequest> Parse(Endpoint endpoint, std::string_view body) const;
  std::unique_ptr<ParsedRequest> ParseJson(Endpoint endpoint, const Json& body) const;

 private:
  engine::AsyncEngine& engine_;
  std::optional<ChatTemplate> chat_template_, tool_chat_template_;
  ProtocolContext ctx_;
};

class Generation {
 public:
  // Submits one engine request per prompt. Throws ApiError: 400 when the engine refuses the
  // request (naming the field), 503 when the engine is dead.
  Generation(Serving& serving, std::unique_ptr<ParsedRequest> request);
  ~Generation();  // aborts what has not finished
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  const ParsedRequest& request() const { return *req_; }
  const std::string& id() const { return meta_id_; }

  // Streaming: the opening chunks (chat: the role chunks).
  std::vector<Json> Start() { return builder_->Start(); }
  // Waits up to `timeout` for outputs and appends the chunks they make (streaming only).
  // Returns true once every engine request has finished.
  bool Poll(std::chrono::milliseconds timeout, std::vector<Json>& chunks);
  // Streaming: the closing chunks (usage); an error chunk first when the engine failed.
  std::vector<Json> End();
  // Non-streaming: waits for the end and returns the response body; throws ApiError 500 when
  // the engine failed the request. `client_gone`, asked every 100 ms while waiting, says the
  // client has left: then every engine request is aborted and nullopt returned.
  std::optional<Json> Complete(const std::function<bool()>& client_gone = {});
  void Abort();  // aborts every unfinished engine request (a client that went away)

 private:
  engine::AsyncEngine& engine_;
  std::unique_ptr<ParsedRequest> req_;
  std::string meta_id_;
  std::unique_ptr<ResponseBuilder> builder_;
  std::vector<std::shared_ptr<engine::RequestStream>> streams_;
  std::vector<bool> done_;
};

}  // namespace vtllm::server
