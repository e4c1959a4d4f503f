// The pool of KV-cache blocks (vLLM V1's BlockPool): reference counts, a free queue in LRU
// order, and the prefix cache (block hash -> block).
//
// A block with reference count 0 sits in the free queue. It may still hold a cached prefix
// (its hash stays until the block is handed out again), so a later request with the same
// prefix can take it back out of the queue ("touch"). New blocks come from the queue's head,
// freed ones go to its tail: the least recently freed cached block is evicted first.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vtllm::engine {

// xxh3-128 of (parent hash, the block's token ids, extra keys).
struct BlockHash {
  uint64_t lo = 0, hi = 0;
  bool operator==(const BlockHash&) const = default;
};
struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 0x9E3779B97F4A7C15ULL)); }
};

// The hash of a full block whose prefix hashes to `parent` (nullopt for the first block).
// `extra` (e.g. the request's cache_salt) is mixed in when non-empty.
BlockHash HashBlock(const std::optional<BlockHash>& parent, std::span<const int32_t> tokens, std::string_view extra);

class BlockPool {
 public:
  BlockPool(int64_t num_blocks, bool enable_caching);

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t num_free_blocks() const { return num_free_; }
  // used / all, in [0, 1].
  double usage() const;

  // Takes `n` blocks from the head of the free queue (evicting their cached hashes); each
  // gets reference count 1. The caller checks num_free_blocks() first.
  std::vector<int32_t> Allocate(int64_t n);
  // Adds a reference to each of `blocks` (prefix hits), taking those with count 0 out of the
  // free queue.
  void Touch(std::span<const int32_t> blocks);
  // Drops one reference of each block, in the given order; those reaching 0 go to the tail
  // of the free queue in that order.
  void Free(std::span<const int32_t> blocks);

  // The cached block holding `hash`, if any.
  std::optional<int32_t> Lookup(const BlockHash& hash) const;
  // Records that `block` (full, referenced) holds `hash`. A hash already cached in another
  // block is left as it is (the block stays uncached).
  void Cache(int32_t block, const BlockHash& hash);

  int32_t ref_count(int32_t block) const { return blocks_.at(static_cast<size_t>(block)).ref_count; }
  bool is_cached(int32_t block) const { return blocks_.at(static_cast<size_t>(block)).hash.has_value(); }
  // Drops every cached hash (the blocks stay where they are).
  void ResetPrefixCache();

 private:
  struct Block {
    int32_t ref_count = 0;
    std::optional<BlockHash> hash;
    int32_t prev = -1, next = -1;  // free-queue links
    bool in_free_queue = false;
  };
  void PushTail(int32_t b);
  void Unlink(int32_t b);

  std::vector<Block> blocks_;
  int32_t head_ = -1, tail_ = -1;
  int64_t num_free_ = 0;
  bool enable_caching_;
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> cached_;
};

}  // namespace vtllm::engine
