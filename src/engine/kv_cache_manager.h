// The KV-cache manager (vLLM V1 semantics): each request's block table, prefix-cache lookups
// and the allocation of blocks for a step's new tokens, over one BlockPool.
//
// The scheduler asks it for blocks; the model runner only reads the block tables it is sent.
// Full-attention layers are the only layer kind so far: every layer shares one block table
// per request. A recurrent layer kind (Gated DeltaNet state) adds a manager of its own
// beside FullAttentionManager, chosen by the layer's cache spec.
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

class KvCacheManager {
 public:
  KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching);

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
  // Gives all of req's blocks back (last block first into the free queue's tail order).
  void Free(const Request& req);
  const std::vector<int32_t>& BlockTable(const std::string& request_id) const;
  bool HasBlocks(const std::string& request_id) const { return tables_.count(request_id) != 0; }
  // Blocks needed to hold `tokens` tokens.
  int64_t BlocksFor(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

 private:
  void UpdateBlockHashes(Request& req) const;

  int64_t block_size_;
  bool caching_;
  BlockPool pool_;
  struct Table {
    std::vector<int32_t> blocks;
    size_t num_cached = 0;  // leading blocks already entered into the prefix cache
  };
  std::unordered_map<std::string, Table> tables_;
  uint64_t queries_ = 0, hits_ = 0;
};

}  // namespace vtllm::engine
