// The OpenAI-compatible HTTP server (cpp-httplib) over a Serving:
//   GET  /v1/models                 POST /v1/completions, /v1/chat/completions (SSE when stream)
//   POST /tokenize, /detokenize     GET  /health (503 once the engine is dead), /ping, /version
//   GET  /metrics (Prometheus text)
// --api-key guards the /v1 routes (401); unknown routes and models are 404; bodies over the
// limit 413; every error has OpenAI's shape. A streaming client that hangs up aborts its
// request at the next write (a comment line is written every second of silence so a client
// waiting in the queue is noticed too).
//
// Threads: cpp-httplib serves each connection on a pool thread for as long as it is open
// (a streaming response holds its thread until it ends), so the pool bounds the connections
// served at once; more wait in the pool's queue.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "server/serving.h"

namespace httplib {
class Server;
}

namespace vtllm::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (Bind returns it)
  std::string api_key;
  size_t max_request_body_bytes = size_t{32} << 20;
  int http_threads = 512;
  int keep_alive_timeout_s = 5;
};

std::string VtllmVersion();

class HttpServer {
 public:
  HttpServer(Serving& serving, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port. Throws std::runtime_error when it cannot.
  int Bind();
  // Serves until Stop(); returns after the last connection has closed.
  void Run();
  // New generation requests get 503 from now on (shutdown has begun); others still answer.
  void Drain() { draining_ = true; }
  // Waits up to `timeout` until no generation request is being answered (after the engine's
  // Shutdown, so the last chunks and [DONE] reach the clients before Stop closes the sockets).
  void WaitIdle(std::chrono::milliseconds timeout);
  // Stops accepting and makes Run return (thread-safe; from a signal-watching thread).
  void Stop();

 private:
  void Routes();
  Serving& serving_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  int listen_socket_ = -1;  // the bound socket, for a larger listen backlog than cpp-httplib's 5
  std::atomic<bool> draining_{false};
  std::shared_ptr<std::atomic<int>> active_ = std::make_shared<std::atomic<int>>(0);  // generations being answered
};

}  // namespace vtllm::server
