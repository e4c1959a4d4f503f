// The engine's state of one running completion (a child of a client request when n > 1):
// its tokens, where the scheduler is with it, and what the output side has sent.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request.h"
#include "engine/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace vtllm::engine {

enum class RequestStatus { kWaiting, kRunning, kPreempted, kFinished };

struct Request {
  std::string id;         // unique: the client's id, with "#<index>" for children past the first
  std::string parent_id;  // the client's request id
  int index = 0;          // child index (CompletionDelta::index)
  std::vector<int32_t> prompt;
  std::vector<int32_t> all_tokens;  // prompt then generated tokens
  SamplingParams params;  // with the engine's defaults filled in
  int64_t max_tokens = 0; // resolved: the smaller of the request's and what the context leaves
  int priority = 0;
  double arrival_time = 0;
  std::string cache_salt;
  uint64_t seed = 0;      // this child's generator seed
  std::vector<std::pair<int32_t, float>> logit_bias;  // clamped to [-100, 100]
  std::vector<std::vector<int32_t>> bad_words_ids;    // token sequences never to complete
  std::vector<int32_t> min_tokens_banned;  // masked while fewer than min_tokens are generated
  size_t max_stop_len = 0;                 // longest stop string, in bytes
  int64_t max_chunk_tokens = 0;            // > 0: cap on one step's tokens (prompt logprobs)
  // Structured outputs: the automaton over the generated tokens (kept in step with them by the
  // engine before each draw, so a preempted and recomputed request keeps its state) and the
  // draw's allowed tokens as a bitmask over the vocabulary.
  std::unique_ptr<GrammarMatcher> grammar;
  std::vector<uint32_t> grammar_bitmask;

  RequestStatus status = RequestStatus::kWaiting;
  int64_t num_computed_tokens = 0;  // tokens whose KV is (or is being) computed
  int64_t num_cached_tokens = -1;   // prefix-cache hit when first scheduled (-1: not yet)
  int64_t num_preemptions = 0;
  std::vector<BlockHash> block_hashes;  // of every full block of all_tokens
  // Async scheduling: tokens drawn by launched steps whose ids the host does not have yet.
  // They count as the request's tokens for scheduling (num_tokens_with_placeholders) and
  // come into all_tokens when their step is collected.
  int64_t num_placeholders = 0;
  uint64_t serial = 0;  // unique per engine: tells a request from a later one of the same id

  std::optional<FinishReason> finish_reason;
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;

  // Output side.
  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  std::string text;              // decoded generated text so far (before stop trimming)
  size_t text_sent = 0;          // bytes of `text` already handed out
  std::vector<PositionLogprobs> pending_logprobs;  // one per generated token not yet handed out
  size_t tokens_sent = 0;        // generated tokens already handed out
  std::vector<PositionLogprobs> prompt_logprobs;   // positions 1.. (when asked)
  bool prompt_logprobs_sent = false;
  bool finish_reported = false;   // the delta with the finish reason was handed out
  double first_scheduled_time = 0, first_token_time = 0, last_token_time = 0;

  int64_t num_prompt_tokens() const { return static_cast<int64_t>(prompt.size()); }
  int64_t num_tokens() const { return static_cast<int64_t>(all_tokens.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens(); }
  int64_t num_tokens_with_placeholders() const { return num_tokens() + num_placeholders; }
  // Whether drawing its next token needs its last tokens on the host: the penalties count
  // them, bad words match them, the grammar advances over them. Such a request is not
  // scheduled ahead of its last draw.
  bool needs_host_tokens() const {
    return grammar != nullptr || !bad_words_ids.empty() || params.repetition_penalty != 1.0 ||
           params.frequency_penalty != 0.0 || params.presence_penalty != 0.0;
  }
  bool finished() const { return status == RequestStatus::kFinished; }
};

}  // namespace vtllm::engine
