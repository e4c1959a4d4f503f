// The C ABI (include/vtllm.h) on the engine and the server's protocol and response code: the
// same validation, the same JSON out, without HTTP.
#include "vtllm.h"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>

#include "default_model/default_model.h"
#include "engine/engine.h"
#include "server/error.h"
#include "server/serving.h"
#include "vt/error.h"

#define VTLLM_EXPORT extern "C" __attribute__((visibility("default")))

using vtllm::server::ApiError;
using vtllm::server::Json;

struct vtllm_engine {
  std::unique_ptr<vtllm::engine::AsyncEngine> engine;
  std::unique_ptr<vtllm::server::Serving> serving;
};

struct vtllm_request {
  std::unique_ptr<vtllm::server::Generation> gen;
  std::deque<std::string> pending;  // chunks made but not yet polled
  bool started = false;             // the opening chunks were queued
  bool done = false;                // the generation ended and its closing chunks were queued
};

namespace {

thread_local std::string last_error;

vtllm_status Fail(vtllm_status s, const std::string& message) {
  last_error = message;
  return s;
}

vtllm_status FromApiError(const ApiError& e) {
  const std::string where = e.param().empty() ? "" : " (" + e.param() + ")";
  const vtllm_status s = e.status() == 404 ? VTLLM_ERR_NOT_FOUND
                         : e.status() < 500 ? VTLLM_ERR_INVALID_ARGUMENT
                                            : VTLLM_ERR_RUNTIME;
  return Fail(s, std::string(e.what()) + where);
}

char* Copy(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

vt::Device ParseDevice(const std::string& s) {
  if (s == "cpu") return vt::Device::Cpu();
  if (s == "cuda") return vt::Device::Cuda(0);
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.find_first_not_of("0123456789", 5) == std::string::npos && s.size() < 9)
    return vt::Device::Cuda(std::stoi(s.substr(5)));
  throw ApiError(400, "BadRequestError", "\"" + s + "\" is not cpu, cuda or cuda:N", "device");
}

std::optional<vt::DType> ParseDType(const std::string& s) {
  if (s == "auto") return std::nullopt;
  if (s == "bfloat16" || s == "bf16") return vt::DType::kBF16;
  if (s == "float32" || s == "f32" || s == "float") return vt::DType::kF32;
  throw ApiError(400, "BadRequestError", "\"" + s + "\" is not auto, bfloat16 or float32", "dtype");
}

vt::CpuIsa ParseCpuIsa(const std::string& s) {
  using vt::CpuIsa;
  if (s == "best") return CpuIsa::kBest;
  std::string valid;  // the levels of this build, as --cpu-isa takes them
  for (CpuIsa isa : vt::CpuIsaLevels()) {
    if (s == vt::CpuIsaName(isa)) return isa;
    valid += std::string(vt::CpuIsaName(isa)) + ", ";
  }
  throw ApiError(400, "BadRequestError", "\"" + s + "\" is not a CPU kernel level of this build (" + valid + "best)",
                 "cpu_isa");
}

// options_json (the serve flags, '-' as '_') -> the engine's and the serving layer's options.
void ParseOptions(const char* options_json, vtllm::engine::EngineConfig& c, vtllm::server::ServingOptions& s) {
  using namespace vtllm::server;
  if (!options_json) return;
  const Json o = ParseBody(options_json);
  for (auto it = o.begin(); it != o.end(); ++it) {
    const std::string& k = it.key();
    auto integer = [&] {
      std::optional<int64_t> v = GetInt(o, k);
      if (!v || *v < 0) throw BadRequest(k, "option '" + k + "' must be a non-negative integer");
      return *v;
    };
    auto string = [&] {
      std::optional<std::string> v = GetString(o, k);
      if (!v) throw BadRequest(k, "option '" + k + "' must be a string");
      return *v;
    };
    auto boolean = [&] {
      std::optional<bool> v = GetBool(o, k);
      if (!v) throw BadRequest(k, "option '" + k + "' must be a boolean");
      return *v;
    };
    if (it->is_null()) continue;
    if (k == "device") c.load.device = ParseDevice(string());
    else if (k == "dtype") c.load.dtype = ParseDType(string());
    else if (k == "threads") c.load.cpu_threads = static_cast<int>(integer());
    else if (k == "cpu_isa") c.load.cpu_isa = ParseCpuIsa(string());
    else if (k == "quantization") c.load.quantization = string();
    else if (k == "tensor_parallel_size") {
      const int64_t n = integer();
      if (n < 1 || n > 1024) throw BadRequest(k, "tensor_parallel_size must be an integer from 1 to 1024");
      c.load.tensor_parallel_size = static_cast<int>(n);
    }
    else if (k == "kv_cache_dtype") {
      const std::string v = string();
      try {
        vtllm::model::ParseKvCacheDtype(v);
      } catch (const vt::Error& e) {
        throw BadRequest(k, e.what());
      }
      c.load.kv_cache_dtype = v;
    }
    else if (k == "max_model_len") c.max_model_len = integer();
    else if (k == "max_num_seqs") c.max_num_seqs = integer();
    else if (k == "max_num_batched_tokens") c.max_num_batched_tokens = integer();
    else if (k == "long_prefill_token_threshold") c.long_prefill_token_threshold = integer();
    else if (k == "block_size") c.block_size = integer();
    else if (k == "kv_cache_memory_bytes") c.kv_cache_memory_bytes = integer();
    else if (k == "gpu_memory_utilization") c.gpu_memory_utilization = GetNumber(o, k).value_or(0.9);
    else if (k == "enable_prefix_caching") c.enable_prefix_caching = boolean();
    else if (k == "no_enable_prefix_caching") c.enable_prefix_caching = !boolean();
    else if (k == "async_scheduling") c.async_scheduling = boolean();
    else if (k == "no_async_scheduling") c.async_scheduling = !boolean();
    else if (k == "seed") c.seed = static_cast<uint64_t>(integer());
    else if (k == "scheduling_policy") {
      const std::string p = string();
      if (p != "fcfs" && p != "priority") throw BadRequest(k, "scheduling_policy must be fcfs or priority");
      c.scheduling_policy = p == "priority" ? vtllm::engine::SchedulingPolicy::kPriority : vtllm::engine::SchedulingPolicy::kFcfs;
    } else if (k == "generation_config") {
      const std::string g = string();
      if (g != "auto" && g != "vllm") throw BadRequest(k, "generation_config must be auto or vllm");
      c.use_generation_config = g == "auto";
    } else if (k == "served_model_name") {
      s.served_model_names = *GetStringOrList(o, k);
    } else if (k == "reasoning_parser") s.reasoning_parser = string();
    else if (k == "tool_call_parser") s.tool_call_parser = string();
    else if (k == "enable_auto_tool_choice") s.enable_auto_tool_choice = boolean();
    else if (k == "host" || k == "port" || k == "api_key" || k == "max_request_body_bytes" || k == "shutdown_timeout" ||
             k == "http_threads") {
      // HTTP server flags: nothing to do without HTTP.
    } else {
      throw BadRequest(k, "unknown option '" + k + "' (options are the serve flags without dashes, '-' as '_')");
    }
  }
}

// A body for one of the two endpoints, with "stream" forced as the entry point needs.
std::unique_ptr<vtllm::server::ParsedRequest> ParseRequest(vtllm_engine* e, const char* request_json, bool stream) {
  using namespace vtllm::server;
  Json body = ParseBody(request_json);
  const Endpoint endpoint = body.contains("messages") ? Endpoint::kChat : Endpoint::kCompletions;
  body["stream"] = stream;
  if (!stream) body.erase("stream_options");
  return e->serving->ParseJson(endpoint, body);
}

}  // namespace

VTLLM_EXPORT int vtllm_abi_version(void) { return VTLLM_ABI_VERSION; }

VTLLM_EXPORT const char* vtllm_last_error(void) { return last_error.c_str(); }

VTLLM_EXPORT vtllm_status vtllm_engine_create(const char* model_dir, const char* options_json, vtllm_engine** out) {
  if (!out) return Fail(VTLLM_ERR_INVALID_ARGUMENT, "vtllm_engine_create: out is NULL");
  *out = nullptr;
  vtllm::engine::EngineConfig config;
  try {
    config.model_dir = model_dir ? std::string(model_dir) : vtllm::DefaultModelDir();
  } catch (const std::exception& err) {
    return Fail(VTLLM_ERR_LOAD, err.what());
  }
  config.load.progress = false;
  vtllm::server::ServingOptions serving;
  try {
    ParseOptions(options_json, config, serving);
  } catch (const ApiError& err) {
    return FromApiError(err);
  }
  if (!model_dir && serving.served_model_names.empty()) serving.served_model_names.push_back("vtllm-default");
  try {
    auto e = std::make_unique<vtllm_engine>();
    e->engine = std::make_unique<vtllm::engine::AsyncEngine>(config);
    e->serving = std::make_unique<vtllm::server::Serving>(*e->engine, serving);
    *out = e.release();
    return VTLLM_OK;
  } catch (const std::invalid_argument& err) {
    return Fail(VTLLM_ERR_INVALID_ARGUMENT, err.what());
  } catch (const std::exception& err) {
    return Fail(VTLLM_ERR_LOAD, err.what());
  }
}

VTLLM_EXPORT void vtllm_engine_destroy(vtllm_engine* e) { delete e; }

VTLLM_EXPORT vtllm_status vtllm_complete(vtllm_engine* e, const char* request_json, char** response_json) {
  if (!e || !request_json || !response_json) return Fail(VTLLM_ERR_INVALID_ARGUMENT, "vtllm_complete: NULL argument");
  *response_json = nullptr;
  try {
    vtllm::server::Generation gen(*e->serving, ParseRequest(e, request_json, false));
    *response_json = Copy(vtllm::server::Dump(*gen.Complete()));  // no client_gone: it always completes
    return VTLLM_OK;
  } catch (const ApiError& err) {
    return FromApiError(err);
  } catch (const std::exception& err) {
    return Fail(VTLLM_ERR_RUNTIME, err.what());
  }
}

VTLLM_EXPORT vtllm_status vtllm_stream(vtllm_engine* e, const char* request_json, vtllm_chunk_fn on_chunk, void* user) {
  if (!e || !request_json || !on_chunk) return Fail(VTLLM_ERR_INVALID_ARGUMENT, "vtllm_stream: NULL argument");
  try {
    vtllm::server::Generation gen(*e->serving, ParseRequest(e, request_json, true));
    auto emit = [&](const std::vector<Json>& chunks) {
      for (const Json& c : chunks)
        if (on_chunk(vtllm::server::Dump(c).c_str(), user) != 0) return false;
      return true;
    };
    if (!emit(gen.Start())) return Fail(VTLLM_ERR_ABORTED, "vtllm_stream: aborted by the callback");
    for (;;) {
      std::vector<Json> chunks;
      const bool done = gen.Poll(std::chrono::milliseconds(100), chunks);
      if (!emit(chunks)) {
        gen.Abort();
        return Fail(VTLLM_ERR_ABORTED, "vtllm_stream: aborted by the callback");
      }
      if (done) break;
    }
    const std::vector<Json> end = gen.End();
    if (!end.empty() && end.front().contains("error"))
      return Fail(VTLLM_ERR_RUNTIME, end.front()["error"]["message"].get<std::string>());
    if (!emit(end)) return Fail(VTLLM_ERR_ABORTED, "vtllm_stream: aborted by the callback");
    return VTLLM_OK;
  } catch (const ApiError& err) {
    return FromApiError(err);
  } catch (const std::exception& err) {
    return Fail(VTLLM_ERR_RUNTIME, err.what());
  }
}

VTLLM_EXPORT vtllm_status vtllm_submit(vtllm_engine* e, const char* request_json, vtllm_request** out) {
  if (!out) return Fail(VTLLM_ERR_INVALID_ARGUMENT, "vtllm_submit: out is NULL");
  *out = nullptr;
  if (!e || !request_json) return Fail(VTLLM_ERR_INVALID_ARGUMENT, "vtllm_submit: NULL argument");
  try {
    auto r = std::make_unique<vtllm_request>();
    r->gen = std::make_unique<vtllm::server::Generation>(*e->serving, ParseRequest(e, request_json, true));
    *out = r.release();
    return VTLLM_OK;
  } catch (const ApiError& err) {
    return FromApiError(err);
  } catch (const std::exception& err) {
    return Fail(VTLLM_ERR_RUNTIME, err.what());
  }
}

VTLLM_EXPORT vtllm_status vtllm_poll(vtllm_request* r, int timeout_ms, char** chunk_json, int* finished) {
  if (!r || !chunk_json || !finished) return Fail(VTLLM_ERR_INVALID_ARGUMENT, "vtllm_poll: NULL argument");
  *chunk_json = nullptr;
  *finished = 0;
  try {
    auto queue = [&](const std::vector<Json>& chunks) {
      for (const Json& c : chunks) r->pending.push_back(vtllm::server::Dump(c));
    };
    if (!r->started) {
      queue(r->gen->Start());
      r->started = true;
    }
    if (r->pending.empty() && !r->done) {
      std::vector<Json> chunks;
      const bool done = r->gen->Poll(std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms), chunks);
      queue(chunks);
      if (done) {
        queue(r->gen->End());
        r->done = true;
      }
    }
    if (!r->pending.empty()) {
      *chunk_json = Copy(r->pending.front());
      r->pending.pop_front();
    }
    *finished = r->done && r->pending.empty() ? 1 : 0;
    return VTLLM_OK;
  } catch (const ApiError& err) {
    return FromApiError(err);
  } catch (const std::exception& err) {
    return Fail(VTLLM_ERR_RUNTIME, err.what());
  }
}

VTLLM_EXPORT vtllm_status vtllm_abort(vtllm_request* r) {
  if (!r) return Fail(VTLLM_ERR_INVALID_ARGUMENT, "vtllm_abort: NULL request");
  r->gen->Abort();
  return VTLLM_OK;
}

VTLLM_EXPORT void vtllm_request_destroy(vtllm_request* r) { delete r; }

VTLLM_EXPORT void vtllm_free(void* p) { std::free(p); }
