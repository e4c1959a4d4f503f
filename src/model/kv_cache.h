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
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vt/device.h"
#include "vt/dtype.h"
#include "vt/queue.h"
#include "vt/tensor.h"

namespace vtllm::model {

// What a recurrent (Gated DeltaNet) layer keeps per sequence, in state slots: one slot per
// running sequence, whatever its length. Per layer and slot: the conv state of the q, k and
// v channels (the last conv_width inputs before the sequence's next token, in the model
// dtype; three tensors because the conv runs on the q, k and v projections separately) and
// the delta rule's state [nv, dk, dv] in f32.
struct StateSpec {
  int64_t num_layers = 0;  // recurrent layers; 0: the model has none
  int64_t num_slots = 0;
  int64_t key_channels = 0, value_channels = 0, conv_width = 0;  // nk*dk, nv*dv, kernel - 1
  int64_t num_value_heads = 0, key_head_dim = 0, value_head_dim = 0;
  vt::DType conv_dtype = vt::DType::kBF16;

  int64_t BytesPerSlot() const;  // all layers
};

// One recurrent layer's state tensors (slot-major).
struct LayerState {
  vt::Tensor conv_q, conv_k, conv_v;  // [num_slots, channels, conv_width] of conv_dtype
  vt::Tensor ssm;                     // [num_slots, nv, dk, dv] F32
};

// What one layer kind keeps per block: full attention's keys and values (num_layers counts
// the full-attention layers). A hybrid model's recurrent layers keep their state in slots
// instead (`state`).
struct KvCacheSpec {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;
  int64_t num_blocks = 0;
  vt::DType dtype = vt::DType::kBF16;
  vt::Device device = vt::Device::Cpu();
  StateSpec state;

  int64_t BytesPerBlock() const;  // all layers, key and value
};

// vLLM's --kv-cache-dtype: "auto" -> nullopt (the model's activation dtype), "fp8" or
// "fp8_e4m3" -> F8E4M3; anything else throws vt::Error naming the flag and the value.
std::optional<vt::DType> ParseKvCacheDtype(const std::string& value);

class KvCacheTensors {
 public:
  explicit KvCacheTensors(const KvCacheSpec& spec);
  const KvCacheSpec& spec() const { return spec_; }
  const vt::Tensor& key(int64_t layer) const { return keys_.at(static_cast<size_t>(layer)); }
  const vt::Tensor& value(int64_t layer) const { return values_.at(static_cast<size_t>(layer)); }
  // Recurrent layer `layer` (counted among the recurrent layers only).
  const LayerState& state(int64_t layer) const { return states_.at(static_cast<size_t>(layer)); }
  // Zeroes every recurrent layer's state of `slot` (a slot handed to a new sequence).
  void ZeroStateSlot(int64_t slot) const;

  // Tensor parallelism: the caches of ranks 1.. of the model that made this one (rank 0's):
  // each rank keeps its KV heads of the same blocks. Empty without tensor parallelism.
  const std::vector<KvCacheTensors>& peer_shards() const;
  void set_peer_shards(std::vector<KvCacheTensors> peers);

 private:
  std::shared_ptr<const std::vector<KvCacheTensors>> peers_;
  KvCacheSpec spec_;
  std::vector<vt::Tensor> keys_, values_;
  std::vector<LayerState> states_;
};

// One sequence's view of a KvCache: the blocks it owns, in order, and how many of its token
// positions hold keys and values.
struct SequenceKv {
  std::vector<int32_t> block_table;
  int64_t num_tokens = 0;  // positions [0, num_tokens) are cached
  int32_t state_slot = -1;  // its recurrent-state slot (hybrid models), -1: none
};

// KvCacheTensors with a stack of free blocks, for single-process use without the engine.
class KvCache {
 public:
  explicit KvCache(const KvCacheSpec& spec);

  const KvCacheSpec& spec() const { return tensors_.spec(); }
  const KvCacheTensors& tensors() const { return tensors_; }
  void set_peer_shards(std::vector<KvCacheTensors> peers) { tensors_.set_peer_shards(std::move(peers)); }
  const vt::Tensor& key(int64_t layer) const { return tensors_.key(layer); }
  const vt::Tensor& value(int64_t layer) const { return tensors_.value(layer); }

  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_free_state_slots() const { return static_cast<int64_t>(free_slots_.size()); }
  // Blocks a sequence of `tokens` positions needs.
  int64_t BlocksFor(int64_t tokens) const { return (tokens + spec().block_size - 1) / spec().block_size; }
  // Gives `seq` enough blocks to hold `new_tokens` more positions (and, for a model with
  // recurrent layers, a state slot if it has none); throws vt::Error naming the counts when
  // the cache has too few free blocks or slots (nothing is taken then).
  void Reserve(SequenceKv& seq, int64_t new_tokens);
  // Returns all of `seq`'s blocks to the pool and empties it.
  void Release(SequenceKv& seq);
  // Slot of token position `pos` of `seq` (which must own the block holding it).
  int64_t SlotOf(const SequenceKv& seq, int64_t pos) const;

 private:
  KvCacheTensors tensors_;
  std::vector<int32_t> free_;  // a stack of free block ids
  std::vector<int32_t> free_slots_;  // a stack of free state slots
};

}  // namespace vtllm::model
