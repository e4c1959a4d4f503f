#include "engine/block_pool.h"

#include <xxhash.h>

#include <cstring>
#include <string>

#include "vt/error.h"

namespace vtllm::engine {

BlockHash HashBlock(const std::optional<BlockHash>& parent, std::span<const int32_t> tokens, std::string_view extra) {
  // The input is laid out explicitly so that the hash does not depend on struct padding:
  // [has parent][parent lo, hi][token ids as little-endian i32][extra bytes][extra length].
  std::string buf;
  buf.reserve(17 + tokens.size() * 4 + extra.size() + 8);
  buf.push_back(parent ? 1 : 0);
  const uint64_t p[2] = {parent ? parent->lo : 0, parent ? parent->hi : 0};
  buf.append(reinterpret_cast<const char*>(p), sizeof p);
  buf.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(int32_t));
  buf.append(extra.data(), extra.size());
  const uint64_t n = extra.size();
  buf.append(reinterpret_cast<const char*>(&n), sizeof n);
  const XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
  return BlockHash{h.low64, h.high64};
}

BlockPool::BlockPool(int64_t num_blocks, bool enable_caching)
    : blocks_(static_cast<size_t>(num_blocks)), enable_caching_(enable_caching) {
  VT_CHECK(num_blocks > 0 && num_blocks <= INT32_MAX, "BlockPool: ", num_blocks, " blocks");
  for (int32_t b = 0; b < static_cast<int32_t>(num_blocks); ++b) PushTail(b);
}

double BlockPool::usage() const {
  return blocks_.empty() ? 0.0 : 1.0 - static_cast<double>(num_free_) / static_cast<double>(blocks_.size());
}

void BlockPool::PushTail(int32_t b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  blk.prev = tail_;
  blk.next = -1;
  if (tail_ >= 0) blocks_[static_cast<size_t>(tail_)].next = b;
  else head_ = b;
  tail_ = b;
  blk.in_free_queue = true;
  ++num_free_;
}

void BlockPool::Unlink(int32_t b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.prev >= 0) blocks_[static_cast<size_t>(blk.prev)].next = blk.next;
  else head_ = blk.next;
  if (blk.next >= 0) blocks_[static_cast<size_t>(blk.next)].prev = blk.prev;
  else tail_ = blk.prev;
  blk.prev = blk.next = -1;
  blk.in_free_queue = false;
  --num_free_;
}

std::vector<int32_t> BlockPool::Allocate(int64_t n) {
  VT_CHECK(n >= 0 && n <= num_free_, "BlockPool: ", n, " blocks asked for, ", num_free_, " free");
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = head_;
    Unlink(b);
    Block& blk = blocks_[static_cast<size_t>(b)];
    if (blk.hash) {  // evict: the block's old prefix is gone
      auto it = cached_.find(*blk.hash);
      if (it != cached_.end() && it->second == b) cached_.erase(it);
      blk.hash.reset();
    }
    blk.ref_count = 1;
    out.push_back(b);
  }
  return out;
}

void BlockPool::Touch(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    Block& blk = blocks_.at(static_cast<size_t>(b));
    if (blk.ref_count == 0) {
      VT_CHECK(blk.in_free_queue, "BlockPool: block ", b, " has no reference but is not free");
      Unlink(b);
    }
    ++blk.ref_count;
  }
}

void BlockPool::Free(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    Block& blk = blocks_.at(static_cast<size_t>(b));
    VT_CHECK(blk.ref_count > 0, "BlockPool: block ", b, " freed more often than taken");
    if (--blk.ref_count == 0) PushTail(b);
  }
}

std::optional<int32_t> BlockPool::Lookup(const BlockHash& hash) const {
  if (!enable_caching_) return std::nullopt;
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::Cache(int32_t block, const BlockHash& hash) {
  if (!enable_caching_) return;
  Block& blk = blocks_.at(static_cast<size_t>(block));
  if (blk.hash) return;  // already holds its prefix
  if (cached_.count(hash)) return;
  blk.hash = hash;
  cached_.emplace(hash, block);
}

void BlockPool::ResetPrefixCache() {
  cached_.clear();
  for (Block& b : blocks_) b.hash.reset();
}

}  // namespace vtllm::engine
