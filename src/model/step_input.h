// The one input of a model step: a flattened batch of sequences, each contributing some new
// tokens (a prefill chunk or one decode token) after the ones already in its KV blocks.
// Plain host data; the model copies it into persistent device buffers.
//
// Sequence s owns rows [query_start_loc[s], query_start_loc[s+1]) of the step's tokens;
// its block table is row s of block_tables (block_table_stride entries per row, only the
// first ceil(seq_lens[s] / block_size) read).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "vt/tensor.h"

namespace vtllm::model {

struct StepInput {
  std::vector<int32_t> token_ids;        // [T]
  std::vector<int64_t> positions;        // [T]
  std::vector<int64_t> slot_mapping;     // [T]
  std::vector<int32_t> query_start_loc;  // [S + 1], starts at 0
  std::vector<int32_t> seq_lens;         // [S], context length after this step
  std::vector<int32_t> block_tables;     // [S, block_table_stride]
  int64_t block_table_stride = 1;
  std::vector<int32_t> logit_rows;       // [R] rows of the T tokens whose logits are wanted
  // [S] each sequence's recurrent-state slot (hybrid models; -1 for other models). A
  // sequence whose first new token is position 0 starts from a zero state: the model zeroes
  // its slot first (a slot is handed to a request exactly then, as hybrid models run
  // without prefix caching and a preempted request is recomputed from position 0).
  std::vector<int32_t> state_slots;
  // Tokens the device drew in the step before that the host does not know yet (async
  // scheduling): on the device, token_ids[row] (0 here) becomes device_token_source[source]
  // before the step runs. Rows ascending.
  struct DeviceToken {
    int32_t row = 0, source = 0;
  };
  std::vector<DeviceToken> device_tokens;
  vt::Tensor device_token_source;  // [n] I32 on the model's device

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(seq_lens.size()); }
  int64_t num_logit_rows() const { return static_cast<int64_t>(logit_rows.size()); }

  // Empties the step, keeping capacity; `stride` entries per block-table row (>= the largest
  // block table of the step's sequences).
  void Clear(int64_t stride);
  // Appends one sequence: `tokens` at positions [start, start + tokens.size()), keys and values
  // written to slots of `block_table` (which must cover those positions), in blocks of
  // `block_size`. Returns the step row of the sequence's first new token.
  int32_t AddSequence(std::span<const int32_t> tokens, int64_t start, std::span<const int32_t> block_table,
                      int64_t block_size, int32_t state_slot = -1);
};

}  // namespace vtllm::model
