// The output side of one completion: stop checks on each new token (vLLM's order), incremental
// detokenization, stop strings searched in the new text only and held back while they may
// still match, and the delta handed to the client.
#pragma once

#include <optional>
#include <set>

#include "engine/request_state.h"

namespace vtllm::engine {

// Appends `token` to req (with its logprobs, when asked) and decides whether req finishes:
// length (max_tokens, max_model_len), then, once min_tokens are generated, EOS (unless
// ignore_eos) and stop_token_ids, then stop strings in the new text. Sets finish_reason and
// the stop reason; trims the text at a stop string (keeping it with include_stop_str_in_output).
void AppendToken(Request& req, int32_t token, std::optional<PositionLogprobs> logprobs,
                 const std::set<int32_t>& eos_ids, int64_t max_model_len);

// What req has produced since the last delta; with stop strings, up to max_stop_len - 1 bytes
// of text stay held back until the request finishes (they may begin a stop string).
CompletionDelta TakeDelta(Request& req);

// Whether req has anything for a delta (new tokens, or a finish not yet reported).
bool HasNews(const Request& req);

}  // namespace vtllm::engine
