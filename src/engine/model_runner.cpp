#include "engine/model_runner.h"

#include <algorithm>

#include "vt/error.h"

namespace vtllm::engine {

ModelRunner::ModelRunner(std::shared_ptr<model::Model> model, int64_t num_blocks, int64_t block_size,
                         const model::StepLimits& limits, int64_t num_state_slots)
    : model_(std::move(model)),
      block_size_(block_size),
      cache_(model_->MakeKvCacheTensors(num_blocks, block_size, num_state_slots)),
      sampler_(model_->queue(), model_->vocab_size(), limits.max_logit_rows) {
  model_->ReserveStepBuffers(limits);
}

namespace {

// Ids masked for this draw: bad words whose prefix the output ends with, and EOS / stop ids
// while min_tokens holds them back.
void BannedIds(const Request& req, std::vector<int32_t>& out) {
  out.clear();
  // Draws in flight count (async scheduling); bad words make a request wait for them.
  if (req.num_output_tokens() + req.num_placeholders < req.params.min_tokens) out = req.min_tokens_banned;
  const std::span<const int32_t> output(req.all_tokens.data() + req.num_prompt_tokens(),
                                        static_cast<size_t>(req.num_output_tokens()));
  for (const std::vector<int32_t>& word : req.bad_words_ids) {
    const size_t prefix = word.size() - 1;
    if (prefix > output.size()) continue;
    if (std::equal(word.begin(), word.begin() + static_cast<std::ptrdiff_t>(prefix), output.end() - prefix))
      out.push_back(word.back());
  }
}

}  // namespace

bool ModelRunner::TakesDeviceTokens() const { return model_->TakesDeviceTokens(); }

StepResult ModelRunner::Execute(const SchedulerOutput& schedule, const RequestTable& requests) {
  Launch(schedule, requests);
  return Collect();
}

void ModelRunner::Launch(const SchedulerOutput& schedule, const RequestTable& requests) {
  for (const std::string& id : schedule.preempted) tables_.erase(id);
  const size_t n = schedule.scheduled.size();
  Pending job;
  job.result.sampled.resize(n);
  job.result.prompt_logprobs.resize(n);
  if (n == 0) {
    pending_.push_back(std::move(job));
    return;
  }

  std::vector<const Request*> reqs(n);
  int64_t stride = 1;
  for (size_t i = 0; i < n; ++i) {
    const ScheduledRequest& s = schedule.scheduled[i];
    auto it = requests.find(s.request_id);
    VT_CHECK(it != requests.end(), "ModelRunner: scheduled request ", s.request_id, " is unknown");
    reqs[i] = it->second.get();
    std::vector<int32_t>& table = tables_[s.request_id];
    if (s.is_new) table = s.block_ids;
    else table.insert(table.end(), s.block_ids.begin(), s.block_ids.end());
    stride = std::max<int64_t>(stride, static_cast<int64_t>(table.size()));
  }

  // One row per sequence that reaches its last token (sampled), then the prompt-logprob rows.
  step_.Clear(stride);
  std::vector<size_t>& sample_of = job.sample_of;
  std::vector<int32_t> plp_rows, plp_targets;
  std::vector<std::pair<size_t, int>> plp_of;  // (scheduled index, k) per prompt-logprob row
  for (size_t i = 0; i < n; ++i) {
    const ScheduledRequest& s = schedule.scheduled[i];
    const Request& req = *reqs[i];
    const int64_t end = s.num_computed_tokens + s.num_new_tokens;
    // Tokens the host has, then (async scheduling) the one the step launched before drew.
    const int64_t known = std::min(end, req.num_tokens()) - s.num_computed_tokens;
    VT_CHECK(known >= s.num_new_tokens - 1 && end <= req.num_tokens_with_placeholders(), "ModelRunner: request ",
             s.request_id, " is scheduled up to token ", end, " but has ", req.num_tokens(), " tokens and ",
             req.num_placeholders, " placeholders");
    tokens_.assign(req.all_tokens.begin() + s.num_computed_tokens, req.all_tokens.begin() + s.num_computed_tokens + known);
    if (known < s.num_new_tokens) tokens_.push_back(0);
    const int32_t first = step_.AddSequence(tokens_, s.num_computed_tokens, tables_[s.request_id], block_size_, s.state_slot);
    if (known < s.num_new_tokens) {
      auto it = last_rows_.find(s.request_id);
      VT_CHECK(it != last_rows_.end() && !req.needs_host_tokens(), "ModelRunner: request ", s.request_id,
               " is scheduled ahead of a token the step before did not draw");
      step_.device_tokens.push_back({first + static_cast<int32_t>(known), it->second});
    }
    if (end == req.num_tokens_with_placeholders()) {
      step_.logit_rows.push_back(first + static_cast<int32_t>(s.num_new_tokens - 1));
      sample_of.push_back(i);
    }
    if (req.params.prompt_logprobs) {
      // Row p predicts prompt token p + 1; entries exist for positions 1 .. P - 1.
      const int64_t from = std::max<int64_t>(s.num_computed_tokens, static_cast<int64_t>(req.prompt_logprobs.size()));
      const int64_t to = std::min<int64_t>(end, req.num_prompt_tokens() - 1);
      for (int64_t p = from; p < to; ++p) {
        plp_rows.push_back(first + static_cast<int32_t>(p - s.num_computed_tokens));
        plp_targets.push_back(req.prompt[static_cast<size_t>(p + 1)]);
        plp_of.emplace_back(i, *req.params.prompt_logprobs);
      }
    }
  }
  if (!step_.device_tokens.empty()) step_.device_token_source = sampler_.sampled_ids();
  const size_t ns = step_.logit_rows.size();
  step_.logit_rows.insert(step_.logit_rows.end(), plp_rows.begin(), plp_rows.end());
  const vt::Tensor logits = model_->Execute(step_, cache_);

  if (!plp_rows.empty()) {
    int k = 0;
    for (const auto& [idx, kk] : plp_of) k = std::max(k, kk);
    std::vector<PositionLogprobs> lp =
        sampler_.Logprobs(logits.Slice(0, static_cast<int64_t>(ns), static_cast<int64_t>(ns + plp_rows.size())),
                          plp_targets, k);
    for (size_t r = 0; r < lp.size(); ++r) {
      PositionLogprobs& p = lp[r];
      p.top.resize(std::min(p.top.size(), static_cast<size_t>(plp_of[r].second)));
      job.result.prompt_logprobs[plp_of[r].first].push_back(std::move(p));
    }
  }
  last_rows_.clear();  // the next step's placeholders come from this step's draw
  if (ns > 0) {
    rows_.assign(ns, SamplingRow{});
    banned_.resize(ns);
    for (size_t r = 0; r < ns; ++r) {
      const Request& req = *reqs[sample_of[r]];
      const SamplingParams& p = req.params;
      SamplingRow& row = rows_[r];
      row.temperature = static_cast<float>(p.temperature);
      row.top_k = p.top_k;
      row.top_p = static_cast<float>(p.top_p);
      row.min_p = static_cast<float>(p.min_p);
      row.repetition_penalty = static_cast<float>(p.repetition_penalty);
      row.frequency_penalty = static_cast<float>(p.frequency_penalty);
      row.presence_penalty = static_cast<float>(p.presence_penalty);
      row.seed = req.seed;
      // Draws in flight count: this draw is the one after them.
      row.draw_index = static_cast<uint64_t>(req.num_output_tokens() + req.num_placeholders);
      row.num_logprobs = p.logprobs ? *p.logprobs : -1;
      row.prompt_tokens = req.prompt;
      row.output_tokens = std::span<const int32_t>(req.all_tokens.data() + req.num_prompt_tokens(),
                                                   static_cast<size_t>(req.num_output_tokens()));
      row.logit_bias = req.logit_bias;
      row.allowed_token_ids = p.allowed_token_ids;
      row.grammar_bitmask = req.grammar_bitmask;
      BannedIds(req, banned_[r]);
      row.banned_token_ids = banned_[r];
    }
    sampler_.Launch(logits.Slice(0, 0, static_cast<int64_t>(ns)), rows_);
    for (size_t r = 0; r < ns; ++r) last_rows_[reqs[sample_of[r]]->id] = static_cast<int32_t>(r);
  } else {
    job.done = vt::Event::Record(model_->queue());
  }
  pending_.push_back(std::move(job));
}

StepResult ModelRunner::Collect() {
  VT_CHECK(!pending_.empty(), "ModelRunner::Collect: no step was launched");
  Pending job = std::move(pending_.front());
  pending_.pop_front();
  if (job.sample_of.empty()) {
    job.done.Wait();
    return std::move(job.result);
  }
  std::vector<SampledToken> sampled = sampler_.Collect();
  for (size_t r = 0; r < job.sample_of.size(); ++r) job.result.sampled[job.sample_of[r]] = std::move(sampled[r]);
  return std::move(job.result);
}

}  // namespace vtllm::engine
