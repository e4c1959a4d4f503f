// What a client asks of the engine (one request: a prompt and its sampling parameters) and
// what the engine hands back (outputs per step, per child of an `n > 1` request).
//
// These are plain data. The server and the C ABI turn OpenAI request bodies into an
// EngineRequest and RequestOutputs into response or chunk JSON; the engine validates every
// field against the model (vocabulary, context length) when the request is added and throws
// RequestError naming the field, so one bad request never disturbs the others.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace vtllm::engine {

// A request the engine refuses, with the request field at fault (OpenAI's error "param").
class RequestError : public std::runtime_error {
 public:
  RequestError(std::string param, const std::string& message) : std::runtime_error(message), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

// Structured outputs (vLLM's `structured_outputs`): the output is constrained to JSON, to a
// schema's JSON or to any object (engine/structured_output.h has the supported subset).
struct StructuredOutputParams {
  enum class Kind { kNone, kJsonSchema, kJsonObject };
  Kind kind = Kind::kNone;
  std::string json_schema;                 // kJsonSchema: the schema, as JSON text
  std::string field = "structured_outputs";  // the request field it came from (errors name it)
  bool enabled() const { return kind != Kind::kNone; }
};

// Sampling and stopping, with vLLM's names, meanings and defaults. A front end starts from
// Engine::default_params() (the checkpoint's generation_config.json values) and sets only the
// fields the client gave.
struct SamplingParams {
  int n = 1;                       // independent completions of the prompt
  double temperature = 1.0;        // < 1e-5: greedy
  double top_p = 1.0;              // (0, 1]
  int top_k = 0;                   // 0 or -1: all tokens
  double min_p = 0.0;              // [0, 1]
  double presence_penalty = 0.0;   // [-2, 2], on generated tokens
  double frequency_penalty = 0.0;  // [-2, 2], on generated tokens
  double repetition_penalty = 1.0; // > 0, on prompt and generated tokens
  std::optional<uint64_t> seed;    // own generator; child i of n uses seed + i
  std::optional<int64_t> max_tokens;  // nullopt: what the context leaves; 0 with prompt_logprobs:
                                      // score the prompt only (it may then fill the context)
  int64_t min_tokens = 0;          // EOS, stop ids and stop strings are held back until then
  std::vector<std::string> stop;   // stop strings
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;
  std::optional<int> logprobs;         // sampled token's logprob plus this many top ones (<= 20)
  std::optional<int> prompt_logprobs;  // the same for every prompt position after the first
  std::map<int32_t, float> logit_bias;  // added to the logits, clamped to [-100, 100] as vLLM
  std::vector<int32_t> allowed_token_ids;  // non-empty: only these may be sampled
  std::vector<std::string> bad_words;      // never generated (each as the tokenizer spells it,
                                           // with and without a leading space)
  StructuredOutputParams structured;       // the grammar mask applies with allowed_token_ids
};

struct EngineRequest {
  std::string request_id;  // unique among live requests
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  int priority = 0;        // --scheduling-policy priority: lower runs first, as vLLM
  std::string cache_salt;  // mixed into the prefix hash of the first block
  double arrival_time = 0; // seconds (steady clock); 0: set when added
};

enum class FinishReason { kStop, kLength, kAbort };
const char* FinishReasonName(FinishReason r);  // "stop", "length", "abort"

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0;
  int64_t rank = 0;  // 1 = most likely
};

// One position's logprobs: the chosen token's and the top-k alternatives (most likely first).
struct PositionLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
};

// What one completion (child `index` of the request) produced since the last output.
struct CompletionDelta {
  int index = 0;
  std::vector<int32_t> token_ids;  // new tokens
  std::string text;                // new text (complete UTF-8; stop strings held back/trimmed)
  std::vector<PositionLogprobs> logprobs;  // one per new token when params.logprobs is set
  std::optional<FinishReason> finish_reason;
  // Why it stopped with kStop: the stop string, or the token of stop_token_ids (neither for
  // EOS, as vLLM reports it).
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  int64_t num_generated = 0;  // tokens of this completion so far (usage)
};

struct RequestOutput {
  std::string request_id;
  std::vector<CompletionDelta> completions;  // the children with news this step
  // Set once, with the first output: prompt logprobs (position 0 has none, as vLLM: the vector
  // has prompt length - 1 entries for positions 1..), the prompt length and its cached tokens.
  std::optional<std::vector<PositionLogprobs>> prompt_logprobs;
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;
  bool finished = false;  // every child has finished
  // A request that failed inside the engine after it was accepted (e.g. the model step threw):
  // finished with this message; the engine goes on with the others.
  std::optional<std::string> error;
};

}  // namespace vtllm::engine
