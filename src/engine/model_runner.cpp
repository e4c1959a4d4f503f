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
  const int64_t generated = req.num_output_tokens();
  if (generated < req.params.min_tokens) out = req.min_tokens_banned;
  const std::span<const int32_t> output(req.all_tokens.data() + req.num_prompt_tokens(),
                                        static_cast<size_t>(generated));
  for (const std::vector<int32_t>& word : req.bad_words_ids) {
    const size_t prefix = word.size() - 1;
    if (prefix > output.size()) continue;
    if (std::equal(word.begin(), word.begin() + static_cast<std::ptrdiff_t>(prefix), output.end() - prefix))
      out.push_back(word.back());
  }
}

}  // namespace

StepResult ModelRunner::Execute(const SchedulerOutput& schedule, const RequestTable& requests) {
  for (const std::string& id : schedule.preempted) tables_.erase(id);
  const size_t n = schedule.scheduled.size();
  StepResult result;
  result.sampled.resize(n);
  result.prompt_logprobs.resize(n);
  if (n == 0) return result;

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
  std::vector<size_t> sample_of;            // scheduled index of each sampled row
  std::vector<int32_t> plp_rows, plp_targets;
  std::vector<std::pair<size_t, int>> plp_of;  // (scheduled index, k) per prompt-logprob row
  for (size_t i = 0; i < n; ++i) {
    const ScheduledRequest& s = schedule.scheduled[i];
    const Request& req = *reqs[i];
    const std::span<const int32_t> tokens(req.all_tokens.data() + s.num_computed_tokens,
                                          static_cast<size_t>(s.num_new_tokens));
    const int32_t first =
        step_.AddSequence(tokens, s.num_computed_tokens, tables_[s.request_id], block_size_, s.state_slot);
    const int64_t end = s.num_computed_tokens + s.num_new_tokens;
    if (end == req.num_tokens()) {
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
      result.prompt_logprobs[plp_of[r].first].push_back(std::move(p));
    }
  }
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
      row.draw_index = static_cast<uint64_t>(req.num_output_tokens());
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
    std::vector<SampledToken> sampled = sampler_.Sample(logits.Slice(0, 0, static_cast<int64_t>(ns)), rows_);
    for (size_t r = 0; r < ns; ++r) result.sampled[sample_of[r]] = std::move(sampled[r]);
  } else {
    model_->queue().Synchronize();
  }
  return result;
}

}  // namespace vtllm::engine
