// The sampler: one token per row of a step's logits, on the model's device, in vLLM's order:
//
//   logprobs snapshot (raw log-softmax, before any processing)
//   -> allowed_token_ids and the structured-output grammar mask -> bad words -> min_tokens (EOS / stop ids masked) -> logit_bias
//   -> repetition, frequency, presence penalties
//   -> greedy when temperature < 1e-5, else temperature, min_p, top_k, top_p, draw.
//
// The processing runs as vt ops on the logits' device (CPU and CUDA kernels, each with a
// scalar reference); only the sampled ids and the requested logprobs reach the host.
// The draw of row r is a pure function of (seed, draw_index): the same seed gives the same
// tokens whatever else runs in the batch.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "vt/queue.h"
#include "vt/tensor.h"

namespace vtllm::engine {

// One row of logits to sample: the request's parameters and the host facts the processing
// needs. Spans point into the engine's request state and stay valid during Sample().
struct SamplingRow {
  float temperature = 1.0f;
  int top_k = 0;  // <= 0: all
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f, frequency_penalty = 0.0f, presence_penalty = 0.0f;
  uint64_t seed = 0;
  uint64_t draw_index = 0;  // which token of the completion this draw is (0 = first)
  int num_logprobs = -1;    // -1: none; else the sampled token's logprob plus this many top ones
  std::span<const int32_t> prompt_tokens;  // repetition penalty: prompt tokens count as seen
  std::span<const int32_t> output_tokens;  // penalties: generated so far (with repeats)
  std::span<const std::pair<int32_t, float>> logit_bias;  // added (already clamped)
  std::span<const int32_t> allowed_token_ids;  // non-empty: every other token is masked
  std::span<const int32_t> banned_token_ids;   // masked this step (bad words, min_tokens)
  // Structured outputs: non-empty: bit t % 32 of word t / 32 set = token t may be drawn; applied
  // with allowed_token_ids (a token must pass both; when none does, the grammar's tokens stay).
  std::span<const uint32_t> grammar_bitmask;
};

struct SampledToken {
  int32_t token_id = 0;
  std::optional<PositionLogprobs> logprobs;  // when num_logprobs >= 0
};

class Sampler {
 public:
  // Buffers for up to `max_rows` rows of `vocab_size` logits on q's device, made once.
  Sampler(const vt::Queue& q, int64_t vocab_size, int64_t max_rows);
  ~Sampler();

  // logits: [R, vocab] F32 on q's device, R == rows.size(); overwritten (processed in place).
  std::vector<SampledToken> Sample(const vt::Tensor& logits, std::span<const SamplingRow> rows);
  // Sample in two halves: Launch enqueues the draw and the copy of its results to the host
  // and returns at once (the rows' spans are read before it returns); Collect waits for the
  // oldest launched draw and returns its tokens. At most two draws are launched and not
  // collected.
  void Launch(const vt::Tensor& logits, std::span<const SamplingRow> rows);
  std::vector<SampledToken> Collect();
  size_t num_pending() const;
  // [max_rows] I32 on q's device: the ids the last launched draw wrote (row r at r), valid
  // for work enqueued before the next launch (async scheduling reads them as the next
  // step's input tokens).
  vt::Tensor sampled_ids() const;

  // Log-softmax of raw logits rows: for row r, the logprob and rank of targets[r] and the
  // top-k tokens (prompt logprobs). logits: [R, vocab] F32, R == targets.size(); unchanged.
  std::vector<PositionLogprobs> Logprobs(const vt::Tensor& logits, std::span<const int32_t> targets, int k);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vtllm::engine
