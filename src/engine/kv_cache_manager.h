// The KV-cache manager (vLLM V1 semantics): each request's block table, prefix-cache lookups
// and the allocation of blocks for a step's new tokens, over one BlockPool.
//
// The scheduler asks it for blocks; the model runner only reads the block tables it is sent.
// Full-attention layers share one block table per request. A hybrid model's recurrent layers
// (Gated DeltaNet) keep their state in slots instead, one per running request, handed out
// by a StateSlotManager beside the blocks: a request gets its slot with its first blocks
// and gives it back with them (finish, abort, preemption).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_pool.h"
#include "engine/request_state.h"

namespace vtllm::engine {

// Prefix-cache hits of a request: blocks whose tokens need no computing.
struct ComputedBlocks {
  std::vector<int32_t> blocks;
  int64_t num_tokens = 0;
};

// The recurrent-state slots of a hybrid model: a plain pool, one slot per running request
// (the model zeroes a slot when the request's first token runs).
class StateSlotManager {
 public:
  explicit StateSlotManager(int64_t num_slots);
  int64_t num_slots() const { return num_slots_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  // The request's slot, taking a free one when it has none; nullopt when none is free.
  std::optional<int32_t> Acquire(const std::string& request_id);
  void Release(const std::string& request_id);
  int32_t SlotOf(const std::string& request_id) const;  // -1: none

 private:
  int64_t num_slots_;
  std::vector<int32_t> free_;  // a stack, lowest slot on top
  std::unordered_map<std::string, int32_t> slots_;
};

class KvCacheManager {
 public:
  // num_state_slots > 0: the model has recurrent layers and every running request holds
  // one of that many state slots (prefix caching must then be off).
  KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching, int64_t num_state_slots = 0);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return pool_.num_blocks(); }
  int64_t num_free_blocks() const { return pool_.num_free_blocks(); }
  double usage() const { return pool_.usage(); }
  bool prefix_caching() const { return caching_; }
  uint64_t prefix_queries() const { return queries_; }  // tokens looked up
  uint64_t prefix_hits() const { return hits_; }        // tokens found

  // The longest cached prefix of req's tokens, in whole blocks, never covering the last token
  // (so at least one token is computed and sampled). Counts a query.
  ComputedBlocks GetComputedBlocks(Request& req);
  // Blocks for `num_new_tokens` more tokens of `req` after its computed ones (and after
  // `computed`, the hits of a request scheduled for the first time). Returns the blocks
  // appended to its table (hits first), or nullopt when the pool has too few free blocks
  // (nothing changes then). Full blocks are entered into the prefix cache.
  std::optional<std::vector<int32_t>> AllocateSlots(Request& req, int64_t num_new_tokens,
                                                    const ComputedBlocks* computed = nullptr);
  // Gives all of req's blocks back (last block first into the free queue's tail order), and
  // its state slot.
  void Free(const Request& req);
  // The request's recurrent-state slot, -1 when the model has none (or it holds none).
  int32_t StateSlot(const std::string& request_id) const { return state_ ? state_->SlotOf(request_id) : -1; }
  int64_t num_state_slots() const { return state_ ? state_->num_slots() : 0; }
  int64_t num_free_state_slots() const { return state_ ? state_->num_free() : 0; }
  const std::vector<int32_t>& BlockTable(const std::string& request_id) const;
  bool HasBlocks(const std::string& request_id) const { return tables_.count(request_id) != 0; }
  // Blocks needed to hold `tokens` tokens.
  int64_t BlocksFor(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

 private:
  void UpdateBlockHashes(Request& req) const;

  int64_t block_size_;
  bool caching_;
  BlockPool pool_;
  std::optional<StateSlotManager> state_;
  struct Table {
    std::vector<int32_t> blocks;
    size_t num_cached = 0;  // leading blocks already entered into the prefix cache
  };
  std::unordered_map<std::string, Table> tables_;
  uint64_t queries_ = 0, hits_ = 0;
};

}  // namespace vtllm::engine
