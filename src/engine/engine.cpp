#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <unordered_map>

#include "engine/model_runner.h"
#include "engine/output_processor.h"
#include "engine/request_validation.h"
#include "engine/scheduler.h"
#include "engine/structured_output.h"
#include "vt/error.h"

namespace vtllm::engine {

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// MemAvailable of /proc/meminfo in bytes (0 when unknown).
int64_t AvailableHostMemory() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

// Rows of logits a step keeps for prompt logprobs beyond its sampled rows: a request asking
// for them is prefilled in chunks of this many tokens.
constexpr int64_t kPromptLogprobChunk = 128;

}  // namespace

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "unknown";
}

// One client request: its children (n of them) and what was already reported.
struct Parent {
  std::string id;
  std::vector<Request*> children;
  int64_t num_prompt_tokens = 0;
  bool first_output_sent = false;
  std::optional<std::string> error;
};

struct Engine::Impl {
  EngineConfig config;
  std::shared_ptr<model::Model> model;
  std::optional<Tokenizer> tokenizer;
  SamplingParams defaults;
  std::set<int32_t> eos_ids;
  int64_t max_model_len = 0;
  std::unique_ptr<KvCacheManager> kv;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<Executor> executor;
  RequestTable requests;  // by child id
  std::unordered_map<std::string, Parent> parents;
  std::vector<std::string> finished_unreported;  // parents finished outside a step (aborts)
  EngineMetrics metrics;
  std::mt19937_64 rng;
  RequestValidator validator;
  std::unique_ptr<TokenVocabulary> so_vocab;  // structured outputs: built at the first such request
  uint64_t next_serial = 1;

  // Steps launched and not yet collected, oldest first: at most one between Step calls, two
  // while a step is launched ahead of the one before.
  struct Launched {
    SchedulerOutput schedule;
    std::vector<uint64_t> serials;  // per scheduled request
    std::vector<bool> drew;         // per scheduled request: the step draws its next token
  };
  std::deque<Launched> in_flight;

  ~Impl();
  void Init();
  // The request of that id if it is still the one with that serial (ids can come back).
  Request* Find(const std::string& id, uint64_t serial) const;
  bool CanRunAhead() const;
  // Launches a schedule; false (its requests ended with the error) when that failed.
  bool LaunchStep(SchedulerOutput schedule, std::vector<std::string>& touched);
  // Collects the oldest launched step and turns its tokens into the requests' outputs.
  void CollectStep(std::vector<std::string>& touched);
  void FailRequests(const SchedulerOutput& schedule, const std::vector<uint64_t>& serials, const std::exception& e,
                    std::vector<std::string>& touched);
  const TokenVocabulary& StructuredVocabulary();
  void FinishChild(Request* req, FinishReason reason, double now);
  void CollectOutputs(const std::vector<std::string>& parent_ids, std::vector<RequestOutput>& out);
};

void Engine::Impl::Init() {
  const model::ModelConfig& mc = model->config();
  const bool cuda = model->queue().device().is_cuda();
  max_model_len = config.max_model_len > 0 ? config.max_model_len : mc.max_position_embeddings;
  VT_CHECK(max_model_len <= mc.max_position_embeddings, "--max-model-len ", max_model_len,
           " exceeds the model's max_position_embeddings ", mc.max_position_embeddings);
  VT_CHECK(config.block_size > 0 && config.block_size <= 1024, "--block-size must be in [1, 1024], got ",
           config.block_size);
  if (config.max_num_seqs <= 0) config.max_num_seqs = cuda ? 256 : 64;
  if (config.max_num_batched_tokens <= 0) config.max_num_batched_tokens = cuda ? 8192 : 2048;
  VT_CHECK(config.max_num_batched_tokens >= config.max_num_seqs, "--max-num-batched-tokens ",
           config.max_num_batched_tokens, " must be >= --max-num-seqs ", config.max_num_seqs);
  VT_CHECK(config.long_prefill_token_threshold >= 0, "--long-prefill-token-threshold must be >= 0 (0: no cap), got ",
           config.long_prefill_token_threshold);
  config.max_model_len = max_model_len;
  if (!config.async_scheduling) config.async_scheduling = cuda;

  // A hybrid model keeps each running sequence's recurrent state in one of max_num_seqs
  // slots; its prefix cache would need states saved at block boundaries, which vtllm does
  // not keep: prefix caching is turned off.
  const bool hybrid = model->has_recurrent_state();
  if (hybrid && config.enable_prefix_caching) {
    config.enable_prefix_caching = false;
    if (config.load.progress)
      std::fprintf(stderr, "%s has recurrent (Gated DeltaNet) layers: prefix caching is off\n",
                   mc.architecture.c_str());
  }
  const int64_t state_bytes = hybrid ? config.max_num_seqs * model->StateBytesPerSlot() : 0;

  // KV capacity: the memory budget in blocks, no more than every sequence at full length
  // (twice, for the prefix cache) would use.
  const int64_t per_block = model->KvCacheBytesPerBlock(config.block_size);
  const int64_t blocks_per_seq = (max_model_len + config.block_size - 1) / config.block_size;
  int64_t budget = config.kv_cache_memory_bytes;
  const bool asked = budget > 0;
  if (budget <= 0) {
    if (cuda) {
      const vt::DeviceMemory m = vt::CudaMemoryInfo(model->queue().device().index);
      VT_CHECK(config.gpu_memory_utilization > 0 && config.gpu_memory_utilization <= 1,
               "--gpu-memory-utilization must be in (0, 1], got ", config.gpu_memory_utilization);
      const double allowed = config.gpu_memory_utilization * static_cast<double>(m.total_bytes);
      const double used = static_cast<double>(m.total_bytes - m.free_bytes);
      // Activations and the sampler's buffers take a share of what is left.
      budget = static_cast<int64_t>(std::max(0.0, (allowed - used) * 0.9));
    } else {
      const int64_t avail = AvailableHostMemory();
      budget = std::min<int64_t>(int64_t{4} << 30, avail > 0 ? avail / 4 : int64_t{1} << 30);
    }
  }
  // The recurrent state slots come out of the same budget.
  VT_CHECK(budget > state_bytes, "the recurrent state of --max-num-seqs ", config.max_num_seqs, " sequences takes ",
           state_bytes, " bytes (", model->StateBytesPerSlot(), " per sequence), more than the ", budget,
           " bytes of the KV cache budget: lower --max-num-seqs or raise ",
           cuda ? "--gpu-memory-utilization" : "--kv-cache-memory-bytes");
  budget -= state_bytes;
  int64_t num_blocks = budget / per_block;
  const bool capped = num_blocks > 2 * blocks_per_seq * config.max_num_seqs;
  num_blocks = std::min(num_blocks, 2 * blocks_per_seq * config.max_num_seqs);
  num_blocks = std::min<int64_t>(num_blocks, INT32_MAX);
  VT_CHECK(num_blocks >= blocks_per_seq, "the KV cache has room for ", num_blocks, " blocks of ",
           config.block_size, " tokens (", budget, " bytes at ", per_block,
           " bytes per block) but one sequence of --max-model-len ", max_model_len, " needs ", blocks_per_seq,
           ": lower --max-model-len or raise ", cuda ? "--gpu-memory-utilization" : "--kv-cache-memory-bytes");
  config.kv_cache_memory_bytes = num_blocks * per_block + state_bytes;
  if (config.load.progress)
    std::fprintf(stderr,
                 "KV cache: %lld blocks of %lld tokens (%.1f MiB, %lld tokens; %s); max_model_len %lld, "
                 "max_num_seqs %lld, max_num_batched_tokens %lld; async scheduling %s\n",
                 static_cast<long long>(num_blocks), static_cast<long long>(config.block_size),
                 static_cast<double>(num_blocks * per_block) / (1 << 20),
                 static_cast<long long>(num_blocks * config.block_size),
                 capped  ? "twice what max_num_seqs sequences of max_model_len hold"
                 : asked ? "--kv-cache-memory-bytes"
                 : cuda  ? "from --gpu-memory-utilization"
                         : "a quarter of free memory, at most 4 GiB",
                 static_cast<long long>(max_model_len), static_cast<long long>(config.max_num_seqs),
                 static_cast<long long>(config.max_num_batched_tokens), *config.async_scheduling ? "on" : "off");

  if (hybrid && config.load.progress)
    std::fprintf(stderr, "Recurrent state: %lld slots of %.2f MiB (%.1f MiB)\n",
                 static_cast<long long>(config.max_num_seqs),
                 static_cast<double>(model->StateBytesPerSlot()) / (1 << 20),
                 static_cast<double>(state_bytes) / (1 << 20));
  kv = std::make_unique<KvCacheManager>(num_blocks, config.block_size, config.enable_prefix_caching,
                                        hybrid ? config.max_num_seqs : 0);
  SchedulerConfig sc;
  sc.max_num_seqs = config.max_num_seqs;
  sc.max_num_batched_tokens = config.max_num_batched_tokens;
  sc.max_model_len = max_model_len;
  sc.long_prefill_token_threshold = config.long_prefill_token_threshold;
  sc.priority = config.scheduling_policy == SchedulingPolicy::kPriority;
  scheduler = std::make_unique<Scheduler>(sc, *kv);
  if (!executor) {
    model::StepLimits limits;
    limits.max_num_tokens = config.max_num_batched_tokens;
    limits.max_num_seqs = config.max_num_seqs;
    limits.max_blocks_per_seq = blocks_per_seq;
    limits.max_logit_rows = config.max_num_seqs + kPromptLogprobChunk;
    executor = std::make_unique<ModelRunner>(model, num_blocks, config.block_size, limits,
                                             hybrid ? config.max_num_seqs : 0);
  }

  // Sampling defaults and the end-of-sequence ids.
  const model::GenerationConfig gen = config.model_dir.empty() ? model::GenerationConfig{}
                                                                : model::GenerationConfig::FromDir(config.model_dir);
  if (config.use_generation_config) {
    defaults.temperature = gen.temperature;
    defaults.top_p = gen.top_p;
    defaults.top_k = static_cast<int>(gen.top_k);
    defaults.min_p = gen.min_p;
    defaults.repetition_penalty = gen.repetition_penalty;
  }
  for (int64_t id : gen.eos_token_ids) eos_ids.insert(static_cast<int32_t>(id));
  for (int64_t id : mc.eos_token_ids) eos_ids.insert(static_cast<int32_t>(id));
  if (tokenizer && tokenizer->eos_token_id()) eos_ids.insert(*tokenizer->eos_token_id());
  rng.seed(config.seed);
  metrics.num_kv_blocks = num_blocks;
  metrics.request_prompt_tokens = Histogram(TokenCountBuckets(max_model_len));
  metrics.request_generation_tokens = Histogram(TokenCountBuckets(max_model_len));

  validator.vocab_size = mc.vocab_size;
  validator.max_model_len = max_model_len;
  validator.max_logprobs = config.max_logprobs;
  validator.max_n = config.max_n;
  validator.tokenizer = tokenizer ? &*tokenizer : nullptr;
}

const TokenVocabulary& Engine::Impl::StructuredVocabulary() {
  if (!so_vocab) {
    // The model's vocabulary (the sampler's rows): tokenizer ids beyond it are never drawn.
    const int64_t vocab = model->config().vocab_size;
    std::vector<std::string> bytes(std::min<size_t>(tokenizer->VocabSize(), static_cast<size_t>(vocab)));
    std::vector<bool> special(bytes.size(), false);
    for (size_t id = 0; id < bytes.size(); ++id) bytes[id] = tokenizer->TokenBytes(static_cast<int32_t>(id));
    for (const Tokenizer::AddedTokenInfo& t : tokenizer->added_tokens())
      if (t.id >= 0 && static_cast<size_t>(t.id) < special.size()) special[static_cast<size_t>(t.id)] = true;
    so_vocab = std::make_unique<TokenVocabulary>(bytes, special, eos_ids, vocab);
  }
  return *so_vocab;
}

Engine::Engine(const EngineConfig& config) : impl_(std::make_unique<Impl>()) {
  impl_->config = config;
  impl_->model = std::shared_ptr<model::Model>(model::Model::Load(config.model_dir, config.load).release());
  if (std::filesystem::exists(std::filesystem::path(config.model_dir) / "tokenizer.json"))
    impl_->tokenizer = Tokenizer::FromDir(config.model_dir);
  impl_->Init();
}

Engine::Engine(const EngineConfig& config, std::shared_ptr<model::Model> model, std::optional<Tokenizer> tokenizer)
    : impl_(std::make_unique<Impl>()) {
  impl_->config = config;
  impl_->model = std::move(model);
  impl_->tokenizer = std::move(tokenizer);
  impl_->Init();
}

Engine::Engine(const EngineConfig& config, std::shared_ptr<model::Model> model, std::optional<Tokenizer> tokenizer,
               std::unique_ptr<Executor> executor)
    : impl_(std::make_unique<Impl>()) {
  impl_->config = config;
  impl_->model = std::move(model);
  impl_->tokenizer = std::move(tokenizer);
  impl_->executor = std::move(executor);
  impl_->Init();
}

Engine::~Engine() = default;

const SamplingParams& Engine::default_params() const { return impl_->defaults; }
const EngineConfig& Engine::config() const { return impl_->config; }
const model::Model& Engine::model() const { return *impl_->model; }
const std::optional<Tokenizer>& Engine::tokenizer() const { return impl_->tokenizer; }
int64_t Engine::max_model_len() const { return impl_->max_model_len; }
int64_t Engine::num_free_blocks() const { return impl_->kv->num_free_blocks(); }
int64_t Engine::num_total_blocks() const { return impl_->kv->num_blocks(); }
int64_t Engine::num_state_slots() const { return impl_->kv->num_state_slots(); }
int64_t Engine::num_free_state_slots() const { return impl_->kv->num_free_state_slots(); }
bool Engine::HasUnfinished() const { return !impl_->parents.empty(); }

void Engine::ValidateRequest(const EngineRequest& request) const { impl_->validator.Validate(request); }

EngineMetrics Engine::metrics() const {
  EngineMetrics m = impl_->metrics;
  m.num_requests_running = static_cast<int64_t>(impl_->scheduler->running().size());
  m.num_requests_waiting = static_cast<int64_t>(impl_->scheduler->waiting().size());
  m.kv_cache_usage = impl_->kv->usage();
  m.prefix_cache_queries = impl_->kv->prefix_queries();
  m.prefix_cache_hits = impl_->kv->prefix_hits();
  m.num_preemptions = impl_->scheduler->num_preemptions();
  return m;
}

void Engine::AddRequest(EngineRequest r) {
  Impl& I = *impl_;
  I.validator.Validate(r);
  if (r.request_id.empty()) r.request_id = "req-" + std::to_string(I.rng());
  if (I.parents.count(r.request_id))
    throw RequestError("request_id", "a request with id '" + r.request_id + "' is already running");
  const double now = Now();
  if (r.arrival_time <= 0) r.arrival_time = now;
  const SamplingParams& p = r.params;
  const int64_t P = static_cast<int64_t>(r.prompt_token_ids.size());
  const int64_t max_tokens = p.max_tokens.value_or(I.max_model_len - P);

  Parent parent;
  parent.id = r.request_id;
  parent.num_prompt_tokens = P;
  const uint64_t base_seed = p.seed.value_or(I.rng());
  std::vector<std::vector<int32_t>> bad_words = I.validator.BadWordsIds(p);
  std::vector<std::pair<int32_t, float>> bias;
  for (const auto& [tok, v] : p.logit_bias) bias.emplace_back(tok, std::clamp(v, -100.0f, 100.0f));
  std::vector<int32_t> min_banned = p.stop_token_ids;
  if (!p.ignore_eos) min_banned.insert(min_banned.end(), I.eos_ids.begin(), I.eos_ids.end());
  size_t max_stop = 0;
  for (const std::string& s : p.stop) max_stop = std::max(max_stop, s.size());
  std::shared_ptr<const JsonGrammar> grammar;
  if (p.structured.kind == StructuredOutputParams::Kind::kJsonSchema)
    grammar = JsonGrammar::FromSchema(p.structured.json_schema, p.structured.field);
  else if (p.structured.kind == StructuredOutputParams::Kind::kJsonObject)
    grammar = JsonGrammar::AnyObject();

  for (int i = 0; i < p.n; ++i) {
    auto req = std::make_unique<Request>();
    req->id = i == 0 ? r.request_id : r.request_id + "#" + std::to_string(i);
    req->parent_id = r.request_id;
    req->index = i;
    req->prompt = r.prompt_token_ids;
    req->all_tokens = r.prompt_token_ids;
    req->params = p;
    req->max_tokens = max_tokens;
    req->priority = r.priority;
    req->arrival_time = r.arrival_time;
    req->cache_salt = r.cache_salt;
    req->serial = I.next_serial++;
    req->seed = base_seed + static_cast<uint64_t>(i);
    req->logit_bias = bias;
    req->bad_words_ids = bad_words;
    req->min_tokens_banned = min_banned;
    req->max_stop_len = max_stop;
    if (p.prompt_logprobs) req->max_chunk_tokens = kPromptLogprobChunk;
    if (grammar) req->grammar = std::make_unique<GrammarMatcher>(grammar);
    if (I.tokenizer) req->detokenizer = std::make_unique<IncrementalDetokenizer>(*I.tokenizer, p.skip_special_tokens);
    parent.children.push_back(req.get());
    I.scheduler->AddRequest(req.get());
    I.requests.emplace(req->id, std::move(req));
  }
  I.parents.emplace(r.request_id, std::move(parent));
}

void Engine::Impl::FinishChild(Request* req, FinishReason reason, double now) {
  if (req->finished()) return;
  scheduler->FinishRequest(req, reason);
  executor->Forget(req->id);
  const FinishReason fr = *req->finish_reason;
  metrics.request_success[FinishReasonName(fr)]++;
  metrics.e2e_request_latency.Observe(now - req->arrival_time);
  if (req->first_scheduled_time > 0) metrics.request_queue_time.Observe(req->first_scheduled_time - req->arrival_time);
  metrics.request_prompt_tokens.Observe(static_cast<double>(req->num_prompt_tokens()));
  metrics.request_generation_tokens.Observe(static_cast<double>(req->num_output_tokens()));
}

void Engine::Abort(const std::string& request_id) {
  Impl& I = *impl_;
  auto it = I.parents.find(request_id);
  if (it == I.parents.end()) return;
  const double now = Now();
  bool any = false;
  for (Request* c : it->second.children)
    if (!c->finished()) {
      c->finish_reason = FinishReason::kAbort;
      I.FinishChild(c, FinishReason::kAbort, now);
      any = true;
    }
  if (any) I.finished_unreported.push_back(request_id);
}

void Engine::Impl::CollectOutputs(const std::vector<std::string>& parent_ids, std::vector<RequestOutput>& out) {
  for (const std::string& pid : parent_ids) {
    auto it = parents.find(pid);
    if (it == parents.end()) continue;
    Parent& parent = it->second;
    RequestOutput o;
    o.request_id = pid;
    bool all_done = true;
    for (Request* c : parent.children) {
      if (HasNews(*c)) o.completions.push_back(TakeDelta(*c));
      all_done = all_done && c->finished() && c->finish_reported;
    }
    if (!parent.first_output_sent && (!o.completions.empty() || all_done)) {
      Request* first = parent.children.front();
      if (first->params.prompt_logprobs) o.prompt_logprobs = first->prompt_logprobs;
      parent.first_output_sent = true;
    }
    o.num_prompt_tokens = parent.num_prompt_tokens;
    o.num_cached_tokens = std::max<int64_t>(0, parent.children.front()->num_cached_tokens);
    o.finished = all_done;
    o.error = parent.error;
    if (o.completions.empty() && !o.finished) continue;
    out.push_back(std::move(o));
    if (all_done) {
      for (Request* c : parent.children) requests.erase(c->id);
      parents.erase(it);
    }
  }
}

Engine::Impl::~Impl() {
  // Launched work still writes into the KV cache and the runner's buffers: let it finish.
  while (!in_flight.empty()) {
    in_flight.pop_front();
    try {
      executor->Collect();
    } catch (const std::exception&) {
    }
  }
}

Request* Engine::Impl::Find(const std::string& id, uint64_t serial) const {
  auto it = requests.find(id);
  return it != requests.end() && it->second->serial == serial ? it->second.get() : nullptr;
}

bool Engine::Impl::CanRunAhead() const {
  if (!*config.async_scheduling || in_flight.size() != 1 || !executor->TakesDeviceTokens()) return false;
  // The requests drawing in the launched step must not need that token for their next draw.
  const Launched& l = in_flight.front();
  for (size_t i = 0; i < l.schedule.scheduled.size(); ++i) {
    if (!l.drew[i]) continue;
    const Request* req = Find(l.schedule.scheduled[i].request_id, l.serials[i]);
    if (req != nullptr && !req->finished() && req->needs_host_tokens()) return false;
  }
  return true;
}

void Engine::Impl::FailRequests(const SchedulerOutput& schedule, const std::vector<uint64_t>& serials,
                                const std::exception& e, std::vector<std::string>& touched) {
  // The step failed as a whole: its requests end with the error; the others go on.
  const double now = Now();
  for (size_t i = 0; i < schedule.scheduled.size(); ++i) {
    Request* req = Find(schedule.scheduled[i].request_id, serials[i]);
    if (req == nullptr) continue;
    Parent& parent = parents.at(req->parent_id);
    parent.error = std::string("the model step failed: ") + e.what();
    for (Request* c : parent.children) {
      c->finish_reason = FinishReason::kAbort;
      FinishChild(c, FinishReason::kAbort, now);
    }
    touched.push_back(req->parent_id);
  }
}

bool Engine::Impl::LaunchStep(SchedulerOutput schedule, std::vector<std::string>& touched) {
  const double start = Now();
  Launched l;
  for (const ScheduledRequest& s : schedule.scheduled) {
    Request* req = requests.at(s.request_id).get();
    if (req->first_scheduled_time == 0) req->first_scheduled_time = start;
    const bool draws = s.num_computed_tokens + s.num_new_tokens == req->num_tokens_with_placeholders();
    if (req->grammar && draws) PrepareGrammarMask(*req, StructuredVocabulary());  // this draw's mask
    l.serials.push_back(req->serial);
    l.drew.push_back(draws);
  }
  try {
    executor->Launch(schedule, requests);
  } catch (const std::exception& e) {
    FailRequests(schedule, l.serials, e, touched);
    return false;
  }
  for (size_t i = 0; i < schedule.scheduled.size(); ++i)
    if (l.drew[i]) ++requests.at(schedule.scheduled[i].request_id)->num_placeholders;
  l.schedule = std::move(schedule);
  in_flight.push_back(std::move(l));
  return true;
}

void Engine::Impl::CollectStep(std::vector<std::string>& touched) {
  Launched l = std::move(in_flight.front());
  in_flight.pop_front();
  const SchedulerOutput& schedule = l.schedule;
  for (size_t i = 0; i < schedule.scheduled.size(); ++i)
    if (Request* req = Find(schedule.scheduled[i].request_id, l.serials[i]); req && l.drew[i]) --req->num_placeholders;
  StepResult result;
  try {
    result = executor->Collect();
  } catch (const std::exception& e) {
    FailRequests(schedule, l.serials, e, touched);
    return;
  }
  const double now = Now();
  ++metrics.steps;
  for (size_t i = 0; i < schedule.scheduled.size(); ++i) {
    // A request that finished (or was aborted) while this step ran takes nothing from it:
    // async scheduling launched it a row it no longer needs.
    Request* req = Find(schedule.scheduled[i].request_id, l.serials[i]);
    if (req == nullptr || req->finished()) continue;
    for (PositionLogprobs& lp : result.prompt_logprobs[i]) req->prompt_logprobs.push_back(std::move(lp));
    if (!result.sampled[i]) continue;
    if (req->max_tokens == 0) {  // a scoring request: its prompt is computed, nothing is drawn
      req->finish_reason = FinishReason::kLength;
      FinishChild(req, FinishReason::kLength, now);
      touched.push_back(req->parent_id);
      continue;
    }
    SampledToken& tok = *result.sampled[i];
    if (req->num_output_tokens() == 0) {
      req->first_token_time = now;
      metrics.time_to_first_token.Observe(now - req->arrival_time);
      metrics.prompt_tokens += static_cast<uint64_t>(req->num_prompt_tokens());
    } else {
      metrics.inter_token_latency.Observe(now - req->last_token_time);
    }
    req->last_token_time = now;
    ++metrics.generation_tokens;
    AppendToken(*req, tok.token_id, std::move(tok.logprobs), eos_ids, max_model_len);
    if (req->grammar && !req->finish_reason && !AdvanceGrammar(*req, tok.token_id, StructuredVocabulary())) {
      req->finish_reason = FinishReason::kStop;  // the value is finished (as if the end were drawn)
      if (req->detokenizer) req->text += req->detokenizer->Finish();
    }
    if (req->finish_reason) FinishChild(req, *req->finish_reason, now);
    touched.push_back(req->parent_id);
  }
}

std::vector<RequestOutput> Engine::Step() {
  Impl& I = *impl_;
  std::vector<RequestOutput> out;
  std::vector<std::string> touched = std::move(I.finished_unreported);
  I.finished_unreported.clear();

  if (I.in_flight.empty()) {
    SchedulerOutput schedule = I.scheduler->Schedule();
    if (!schedule.empty()) I.LaunchStep(std::move(schedule), touched);
  }
  if (!I.in_flight.empty()) {
    // Async scheduling: the next step is scheduled and launched while this one runs.
    if (I.CanRunAhead()) {
      SchedulerOutput next = I.scheduler->Schedule();
      if (!next.empty() && I.LaunchStep(std::move(next), touched)) ++I.metrics.steps_launched_ahead;
    }
    I.CollectStep(touched);
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  I.CollectOutputs(touched, out);
  // Once nothing is left to serve, a step launched ahead only drew rows nobody takes: wait
  // for it, so that an idle engine has nothing running.
  std::vector<std::string> none;
  while (I.parents.empty() && !I.in_flight.empty()) I.CollectStep(none);
  return out;
}

}  // namespace vtllm::engine
