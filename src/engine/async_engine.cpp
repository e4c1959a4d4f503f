// AsyncEngine: an Engine stepping on a thread of its own, fed by Submit/Abort from any thread,
// its outputs handed to one RequestStream per request.
#include <atomic>

#include "engine/engine.h"
#include "vt/error.h"

namespace vtllm::engine {

std::optional<RequestOutput> RequestStream::Next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || (done_ && queue_.empty()); });
  if (queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  if (done_ && queue_.empty()) delivered_ = true;
  return out;
}

bool RequestStream::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ && queue_.empty();
}

void RequestStream::Push(RequestOutput out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    if (out.finished) done_ = true;
    queue_.push_back(std::move(out));
  }
  cv_.notify_all();
}

AsyncEngine::AsyncEngine(const EngineConfig& config) : engine_(std::make_unique<Engine>(config)) {
  metrics_ = engine_->metrics();
  thread_ = std::thread([this] { Loop(); });
}

AsyncEngine::AsyncEngine(const EngineConfig& config, std::shared_ptr<model::Model> model,
                         std::optional<Tokenizer> tokenizer)
    : engine_(std::make_unique<Engine>(config, std::move(model), std::move(tokenizer))) {
  metrics_ = engine_->metrics();
  thread_ = std::thread([this] { Loop(); });
}

AsyncEngine::~AsyncEngine() {
  Shutdown(std::chrono::milliseconds(0));
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestStream> AsyncEngine::Submit(EngineRequest request) {
  engine_->ValidateRequest(request);  // RequestError on the caller's thread
  std::lock_guard<std::mutex> lock(mu_);
  VT_CHECK(!dead_, "the engine has stopped after an internal error");
  VT_CHECK(accepting_, "the engine is shutting down and takes no new requests");
  if (request.request_id.empty()) request.request_id = "req-" + std::to_string(next_id_++);
  if (streams_.count(request.request_id))
    throw RequestError("request_id", "a request with id '" + request.request_id + "' is already running");
  auto stream = std::make_shared<RequestStream>(request.request_id);
  streams_[request.request_id] = stream;
  incoming_.push_back(std::move(request));
  cv_.notify_all();
  return stream;
}

void AsyncEngine::Abort(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  aborts_.push_back(request_id);
  cv_.notify_all();
}

void AsyncEngine::Shutdown(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  accepting_ = false;
  const auto until = std::chrono::steady_clock::now() + timeout;
  cv_.wait_until(lock, until, [&] { return streams_.empty() || dead_ || stopping_; });
  stopping_ = true;
  cv_.notify_all();
  lock.unlock();
  if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) thread_.join();
}

bool AsyncEngine::healthy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !dead_;
}

EngineMetrics AsyncEngine::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

void AsyncEngine::Loop() {
  std::vector<EngineRequest> incoming;
  std::vector<std::string> aborts;
  while (true) {
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !incoming_.empty() || !aborts_.empty() || engine_->HasUnfinished();
      });
      stop = stopping_;
      incoming.swap(incoming_);
      aborts.swap(aborts_);
      // A consumer that dropped its stream (a client that went away) aborts its request.
      for (const auto& [id, weak] : streams_)
        if (weak.expired()) aborts.push_back(id);
    }
    std::vector<std::pair<std::string, RequestOutput>> failed;
    for (EngineRequest& r : incoming) {
      const std::string id = r.request_id;
      try {
        engine_->AddRequest(std::move(r));
      } catch (const std::exception& e) {
        RequestOutput o;
        o.request_id = id;
        o.finished = true;
        o.error = e.what();
        failed.emplace_back(id, std::move(o));
      }
    }
    incoming.clear();
    if (stop) {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, weak] : streams_) aborts.push_back(id);
    }
    for (const std::string& id : aborts) engine_->Abort(id);
    aborts.clear();
    std::vector<RequestOutput> outs;
    try {
      if (engine_->HasUnfinished()) outs = engine_->Step();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      dead_ = true;
      for (const auto& [id, weak] : streams_)
        if (auto s = weak.lock()) {
          RequestOutput o;
          o.request_id = id;
          o.finished = true;
          o.error = std::string("engine failure: ") + e.what();
          s->Push(std::move(o));
        }
      streams_.clear();
      cv_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, o] : failed) outs.push_back(std::move(o));
    for (RequestOutput& o : outs) {
      auto it = streams_.find(o.request_id);
      if (it == streams_.end()) continue;
      const bool fin = o.finished;
      if (auto s = it->second.lock()) s->Push(std::move(o));
      if (fin) streams_.erase(it);
    }
    metrics_ = engine_->metrics();
    if (stop && !engine_->HasUnfinished()) {
      streams_.clear();
      cv_.notify_all();
      return;
    }
    cv_.notify_all();
  }
}

}  // namespace vtllm::engine
