#include "server/server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <chrono>
#include <csignal>
#include <ctime>
#include <functional>
#include <thread>

#include "server/client_socket.h"
#include "server/error.h"
#include "server/metrics_text.h"

#ifndef VTLLM_VERSION
#define VTLLM_VERSION "0.0.0"
#endif

namespace vtllm::server {

namespace {

using Clock = std::chrono::steady_clock;

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(ErrorBody(e), "application/json");
}

void SendJson(httplib::Response& res, const Json& j) {
  res.status = 200;
  res.set_content(Dump(j), "application/json");
}

bool SameSecret(const std::string& a, const std::string& b) {
  // Constant time in the length of the expected value.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) diff |= static_cast<unsigned char>(b[i] ^ (i < a.size() ? a[i] : 0));
  return diff == 0;
}

// The error body for a status cpp-httplib set itself (no route, body too large, bad framing).
ApiError ErrorForStatus(int status, const httplib::Request& req, size_t body_limit) {
  switch (status) {
    case 404: return NotFound("", "Not Found: " + req.path);
    case 413: return PayloadTooLarge(body_limit);
    case 400: return BadRequest("", "Malformed HTTP request.");
    default: return ApiError(status, "Error", "HTTP status " + std::to_string(status) + ".");
  }
}

// The SSE stream of one generation: chunks as the engine produces them, then [DONE].
struct StreamState {
  bool started = false;
  Clock::time_point last_write = Clock::now();
};

// Counts a generation request as being answered for as long as it lives.
class ActiveGuard {
 public:
  explicit ActiveGuard(std::shared_ptr<std::atomic<int>> n) : n_(std::move(n)) { ++*n_; }
  ~ActiveGuard() { --*n_; }
  ActiveGuard(const ActiveGuard&) = delete;
  ActiveGuard& operator=(const ActiveGuard&) = delete;

 private:
  std::shared_ptr<std::atomic<int>> n_;
};

std::string SseEvents(const std::vector<Json>& chunks) {
  std::string out;
  for (const Json& c : chunks) {
    out += "data: ";
    out += Dump(c);
    out += "\n\n";
  }
  return out;
}

// A POST handler that gets the body read under the size limit. cpp-httplib checks its own
// limit only against Content-Length; a chunked body is counted here as it arrives. An
// over-long body is answered 413 and the connection closed (the rest is never read).
httplib::Server::HandlerWithContentReader WithBody(size_t limit,
                                                  std::function<void(const httplib::Request&, httplib::Response&, const std::string&)> fn) {
  return [limit, fn = std::move(fn)](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    std::string body;
    bool too_large = false;
    const bool ok = reader([&](const char* data, size_t len) {
      if (body.size() + len > limit) {
        too_large = true;
        return false;
      }
      body.append(data, len);
      return true;
    });
    if (too_large || (!ok && res.status == 413)) {
      res.set_header("Connection", "close");
      return SendError(res, PayloadTooLarge(limit));
    }
    if (!ok) {
      res.set_header("Connection", "close");
      return SendError(res, BadRequest("", "The request body could not be read."));
    }
    fn(req, res, body);
  };
}

}  // namespace

std::string VtllmVersion() { return VTLLM_VERSION; }

HttpServer::HttpServer(Serving& serving, ServerOptions options)
    : serving_(serving), options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  // A client that hangs up must not kill the process on the next write.
  std::signal(SIGPIPE, SIG_IGN);
  const size_t threads = static_cast<size_t>(std::max(options_.http_threads, 4));
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_request_body_bytes);
  http_->set_keep_alive_max_count(100000);
  http_->set_keep_alive_timeout(options_.keep_alive_timeout_s);
  http_->set_tcp_nodelay(true);
  // A request is read as soon as its connection gets a pool thread, but under full load
  // (every core busy with model steps) that thread may wait its turn for seconds.
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  http_->set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_socket_ = static_cast<int>(sock);
  });
  Routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::Bind() {
  int port = options_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
    if (port < 0) throw std::runtime_error("cannot bind " + options_.host + " to a free port");
  } else if (!http_->bind_to_port(options_.host, port)) {
    throw std::runtime_error("cannot bind " + options_.host + ":" + std::to_string(port) +
                             " (in use, or not an address of this machine)");
  }
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of new connections (a benchmark
  // opening 128 at once) then overflows the accept queue. Listening again on the bound
  // socket raises it (Linux takes the new backlog).
  if (listen_socket_ >= 0) (void)::listen(listen_socket_, SOMAXCONN);
  return port;
}

void HttpServer::Run() { http_->listen_after_bind(); }

void HttpServer::WaitIdle(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (*active_ > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  // A non-streaming response is written just after its handler returns.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

void HttpServer::Stop() { http_->stop(); }

void HttpServer::Routes() {
  httplib::Server& s = *http_;
  const std::string api_key = options_.api_key;
  s.set_pre_routing_handler([api_key](const httplib::Request& req, httplib::Response& res) {
    if (!api_key.empty() && req.path.rfind("/v1", 0) == 0) {
      const std::string auth = req.get_header_value("Authorization");
      if (!SameSecret(auth, "Bearer " + api_key)) {
        SendError(res, Unauthorized());
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  const size_t body_limit = options_.max_request_body_bytes;
  s.set_error_handler(httplib::Server::HandlerWithResponse(
      [body_limit](const httplib::Request& req, httplib::Response& res) {
        if (res.body.empty() && !res.is_chunked_content_provider_)
          SendError(res, ErrorForStatus(res.status, req, body_limit));
        return httplib::Server::HandlerResponse::Handled;
      }));
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    SendError(res, InternalError(what));
  });

  // Generation endpoints.
  auto generate = [this](Endpoint endpoint) {
    return WithBody(options_.max_request_body_bytes, [this, endpoint](const httplib::Request& req,
                                                                      httplib::Response& res, const std::string& body) {
      if (draining_) return SendError(res, ServiceUnavailable("The server is shutting down."));
      if (!serving_.engine().healthy()) return SendError(res, ServiceUnavailable("The engine has failed."));
      auto active = std::make_shared<ActiveGuard>(active_);
      std::shared_ptr<Generation> gen;
      try {
        gen = std::make_shared<Generation>(serving_, serving_.Parse(endpoint, body));
      } catch (const ApiError& e) {
        return SendError(res, e);
      } catch (const std::exception& e) {
        return SendError(res, BadRequest("", e.what()));
      }
      if (!gen->request().stream) {
        try {
          // Nothing is written before the response is whole, so a client that hangs up is
          // noticed on its socket; its requests are aborted and nothing is sent.
          const ClientSocket client(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
          std::optional<Json> body = gen->Complete([&client] { return client.PeerClosed(); });
          if (!body) {
            res.set_header("Connection", "close");
            return;
          }
          return SendJson(res, *body);
        } catch (const ApiError& e) {
          return SendError(res, e);
        }
      }
      auto state = std::make_shared<StreamState>();
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [gen, state, active](size_t, httplib::DataSink& sink) {
            std::vector<Json> chunks;
            if (!state->started) {
              chunks = gen->Start();
              state->started = true;
            }
            const bool done = gen->Poll(std::chrono::milliseconds(250), chunks);
            std::string out = SseEvents(chunks);
            if (done) {
              out += SseEvents(gen->End());
              out += "data: [DONE]\n\n";
            }
            const Clock::time_point now = Clock::now();
            // An SSE comment during long silences (queued, long prefill): the write that
            // fails tells us the client has gone.
            if (out.empty() && now - state->last_write > std::chrono::seconds(1)) out = ": keep-alive\n\n";
            if (!out.empty()) {
              if (!sink.write(out.data(), out.size())) {
                gen->Abort();
                return false;
              }
              state->last_write = now;
            }
            if (done) sink.done();
            return true;
          },
          [gen](bool success) {
            if (!success) gen->Abort();
          });
    });
  };
  s.Post("/v1/completions", generate(Endpoint::kCompletions));
  s.Post("/v1/chat/completions", generate(Endpoint::kChat));

  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    Json data = Json::array();
    for (const std::string& name : serving_.context().served_model_names)
      data.push_back({{"id", name},
                      {"object", "model"},
                      {"created", static_cast<int64_t>(std::time(nullptr))},
                      {"owned_by", "vtllm"},
                      {"root", serving_.engine().engine().config().model_dir},
                      {"parent", nullptr},
                      {"max_model_len", serving_.context().max_model_len},
                      {"vocab_size", serving_.context().vocab_size}});
    SendJson(res, {{"object", "list"}, {"data", std::move(data)}});
  });
  s.Post("/tokenize", WithBody(body_limit, [this](const httplib::Request&, httplib::Response& res, const std::string& body) {
    try {
      TokenizeResult t = ParseTokenizeRequest(ParseBody(body), serving_.context());
      Json j = {{"count", t.tokens.size()}, {"max_model_len", serving_.context().max_model_len}, {"tokens", t.tokens}};
      SendJson(res, j);
    } catch (const ApiError& e) {
      SendError(res, e);
    } catch (const std::exception& e) {
      SendError(res, BadRequest("", e.what()));
    }
  }));
  s.Post("/detokenize", WithBody(body_limit, [this](const httplib::Request&, httplib::Response& res, const std::string& body) {
    try {
      const std::vector<int32_t> ids = ParseDetokenizeRequest(ParseBody(body), serving_.context());
      SendJson(res, {{"prompt", serving_.context().tokenizer->Decode(ids)}});
    } catch (const ApiError& e) {
      SendError(res, e);
    } catch (const std::exception& e) {
      SendError(res, BadRequest("", e.what()));
    }
  }));
  auto health = [this](const httplib::Request&, httplib::Response& res) {
    if (serving_.engine().healthy()) {
      res.status = 200;
    } else {
      SendError(res, ServiceUnavailable("The engine has failed."));
    }
  };
  s.Get("/health", health);
  s.Get("/ping", health);
  s.Post("/ping", health);
  s.Get("/version", [](const httplib::Request&, httplib::Response& res) { SendJson(res, {{"version", VtllmVersion()}}); });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(MetricsText(serving_.engine().metrics(), serving_.model_name()), "text/plain; version=0.0.4; charset=utf-8");
  });

  // The right path with the wrong method: 405, as FastAPI answers.
  auto not_allowed = [](const httplib::Request& req, httplib::Response& res) {
    SendError(res, MethodNotAllowed(req.method, req.path));
  };
  for (const char* p : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"}) s.Get(p, not_allowed);
  for (const char* p : {"/v1/models", "/health", "/version", "/metrics"}) s.Post(p, not_allowed);
}

}  // namespace vtllm::server
