// The paged KV cache: fixed-size blocks of token slots shared by all sequences, and the
// per-sequence block tables that map a sequence's token positions onto them (vLLM's
// layout; the engine's scheduler will own the allocation policy).
//
// Storage per layer: key and value tensors [num_blocks, block_size, Hk, D]. Token position
// p of a sequence lives in slot block_table[p / block_size] * block_size + p % block_size.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "vt/device.h"
#include "vt/dtype.h"
#include "vt/queue.h"
#include "vt/tensor.h"

namespace vtllm::model {

struct KvCacheSpec {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;
  int64_t num_blocks = 0;
  vt::DType dtype = vt::DType::kBF16;
  vt::Device device = vt::Device::Cpu();

  int64_t BytesPerBlock() const;  // all layers, key and value
};

// One sequence's view of the cache: the blocks it owns, in order, and how many of its token
// positions hold keys and values.
struct SequenceKv {
  std::vector<int32_t> block_table;
  int64_t num_tokens = 0;  // positions [0, num_tokens) are cached
};

class KvCache {
 public:
  explicit KvCache(const KvCacheSpec& spec);

  const KvCacheSpec& spec() const { return spec_; }
  const vt::Tensor& key(int64_t layer) const { return keys_.at(static_cast<size_t>(layer)); }
  const vt::Tensor& value(int64_t layer) const { return values_.at(static_cast<size_t>(layer)); }

  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  // Blocks a sequence of `tokens` positions needs.
  int64_t BlocksFor(int64_t tokens) const { return (tokens + spec_.block_size - 1) / spec_.block_size; }
  // Gives `seq` enough blocks to hold `new_tokens` more positions; throws vt::Error naming
  // the counts when the cache has too few free blocks (nothing is taken then).
  void Reserve(SequenceKv& seq, int64_t new_tokens);
  // Returns all of `seq`'s blocks to the pool and empties it.
  void Release(SequenceKv& seq);
  // Slot of token position `pos` of `seq` (which must own the block holding it).
  int64_t SlotOf(const SequenceKv& seq, int64_t pos) const;

 private:
  KvCacheSpec spec_;
  std::vector<vt::Tensor> keys_, values_;
  std::vector<int32_t> free_;  // a stack of free block ids
};

// A step's attention inputs for a batch of sequences, on the model's device:
// the new tokens of sequence s are rows [query_start_loc[s], query_start_loc[s+1]).
struct AttentionMetadata {
  vt::Tensor positions;        // [T] I64
  vt::Tensor slot_mapping;     // [T] I64
  vt::Tensor block_tables;     // [S, max_blocks] I32
  vt::Tensor seq_lens;         // [S] I32, context length after this step
  vt::Tensor query_start_loc;  // [S+1] I32
  int64_t num_tokens = 0;
};

// One sequence's part of a step: `num_new` tokens appended at positions
// [seq.num_tokens, seq.num_tokens + num_new). The blocks must already be reserved.
struct StepSequence {
  const SequenceKv* seq = nullptr;
  int64_t num_new = 0;
};

AttentionMetadata BuildAttentionMetadata(const KvCache& cache, std::span<const StepSequence> batch);

}  // namespace vtllm::model
