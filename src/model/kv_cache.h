// The paged KV cache's storage: per layer, key and value tensors [num_blocks, block_size, Hk, D]
// (vLLM's layout). Token position p of a sequence lives in slot
// block_table[p / block_size] * block_size + p % block_size.
//
// KvCacheTensors is the model runner's part: the tensors, with no allocation policy. The
// engine's KV-cache manager owns the blocks (pool, reference counts, prefix cache) and hands the
// model block tables through StepInput. KvCache adds a plain free list of blocks for tools and
// tests that run sequences without the engine.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "vt/device.h"
#include "vt/dtype.h"
#include "vt/queue.h"
#include "vt/tensor.h"

namespace vtllm::model {

// What one layer kind keeps per block. Full attention is the only kind so far; a recurrent
// layer kind (Gated DeltaNet state) adds its own spec beside it.
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

class KvCacheTensors {
 public:
  explicit KvCacheTensors(const KvCacheSpec& spec);
  const KvCacheSpec& spec() const { return spec_; }
  const vt::Tensor& key(int64_t layer) const { return keys_.at(static_cast<size_t>(layer)); }
  const vt::Tensor& value(int64_t layer) const { return values_.at(static_cast<size_t>(layer)); }

 private:
  KvCacheSpec spec_;
  std::vector<vt::Tensor> keys_, values_;
};

// One sequence's view of a KvCache: the blocks it owns, in order, and how many of its token
// positions hold keys and values.
struct SequenceKv {
  std::vector<int32_t> block_table;
  int64_t num_tokens = 0;  // positions [0, num_tokens) are cached
};

// KvCacheTensors with a stack of free blocks, for single-process use without the engine.
class KvCache {
 public:
  explicit KvCache(const KvCacheSpec& spec);

  const KvCacheSpec& spec() const { return tensors_.spec(); }
  const KvCacheTensors& tensors() const { return tensors_; }
  const vt::Tensor& key(int64_t layer) const { return tensors_.key(layer); }
  const vt::Tensor& value(int64_t layer) const { return tensors_.value(layer); }

  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  // Blocks a sequence of `tokens` positions needs.
  int64_t BlocksFor(int64_t tokens) const { return (tokens + spec().block_size - 1) / spec().block_size; }
  // Gives `seq` enough blocks to hold `new_tokens` more positions; throws vt::Error naming
  // the counts when the cache has too few free blocks (nothing is taken then).
  void Reserve(SequenceKv& seq, int64_t new_tokens);
  // Returns all of `seq`'s blocks to the pool and empties it.
  void Release(SequenceKv& seq);
  // Slot of token position `pos` of `seq` (which must own the block holding it).
  int64_t SlotOf(const SequenceKv& seq, int64_t pos) const;

 private:
  KvCacheTensors tensors_;
  std::vector<int32_t> free_;  // a stack of free block ids
};

}  // namespace vtllm::model
