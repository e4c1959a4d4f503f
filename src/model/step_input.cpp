#include "model/step_input.h"

#include <algorithm>

#include "vt/error.h"

namespace vtllm::model {

void StepInput::Clear(int64_t stride) {
  VT_CHECK(stride > 0, "StepInput: block-table stride must be > 0, got ", stride);
  token_ids.clear();
  positions.clear();
  slot_mapping.clear();
  query_start_loc.assign(1, 0);
  seq_lens.clear();
  block_tables.clear();
  logit_rows.clear();
  state_slots.clear();
  device_tokens.clear();
  device_token_source = vt::Tensor();
  block_table_stride = stride;
}

int32_t StepInput::AddSequence(std::span<const int32_t> tokens, int64_t start, std::span<const int32_t> block_table,
                               int64_t block_size, int32_t state_slot) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  VT_CHECK(n > 0, "StepInput: a sequence needs at least one new token");
  VT_CHECK(start >= 0 && block_size > 0, "StepInput: start ", start, " and block size ", block_size);
  const int64_t end = start + n;
  const int64_t blocks = (end + block_size - 1) / block_size;
  VT_CHECK(static_cast<int64_t>(block_table.size()) >= blocks, "StepInput: ", end, " tokens need ", blocks,
           " blocks of ", block_size, " but the block table has ", block_table.size());
  VT_CHECK(static_cast<int64_t>(block_table.size()) <= block_table_stride, "StepInput: a block table of ",
           block_table.size(), " entries is wider than the step's stride ", block_table_stride);
  if (query_start_loc.empty()) query_start_loc.push_back(0);
  const int32_t first_row = static_cast<int32_t>(token_ids.size());
  token_ids.insert(token_ids.end(), tokens.begin(), tokens.end());
  for (int64_t p = start; p < end; ++p) {
    positions.push_back(p);
    slot_mapping.push_back(static_cast<int64_t>(block_table[static_cast<size_t>(p / block_size)]) * block_size +
                           p % block_size);
  }
  const size_t row = block_tables.size();
  block_tables.resize(row + static_cast<size_t>(block_table_stride), 0);
  std::copy(block_table.begin(), block_table.end(), block_tables.begin() + static_cast<std::ptrdiff_t>(row));
  seq_lens.push_back(static_cast<int32_t>(end));
  state_slots.push_back(state_slot);
  query_start_loc.push_back(static_cast<int32_t>(token_ids.size()));
  return first_row;
}

}  // namespace vtllm::model
