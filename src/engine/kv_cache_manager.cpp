#include "engine/kv_cache_manager.h"

#include <algorithm>
#include <cstdint>

#include "vt/error.h"

namespace vtllm::engine {

StateSlotManager::StateSlotManager(int64_t num_slots) : num_slots_(num_slots) {
  VT_CHECK(num_slots > 0 && num_slots <= INT32_MAX, "StateSlotManager: ", num_slots, " slots");
  for (int64_t s = num_slots - 1; s >= 0; --s) free_.push_back(static_cast<int32_t>(s));
}

std::optional<int32_t> StateSlotManager::Acquire(const std::string& request_id) {
  auto it = slots_.find(request_id);
  if (it != slots_.end()) return it->second;
  if (free_.empty()) return std::nullopt;
  const int32_t slot = free_.back();
  free_.pop_back();
  slots_.emplace(request_id, slot);
  return slot;
}

void StateSlotManager::Release(const std::string& request_id) {
  auto it = slots_.find(request_id);
  if (it == slots_.end()) return;
  free_.push_back(it->second);
  slots_.erase(it);
}

int32_t StateSlotManager::SlotOf(const std::string& request_id) const {
  auto it = slots_.find(request_id);
  return it == slots_.end() ? -1 : it->second;
}

KvCacheManager::KvCacheManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching,
                               int64_t num_state_slots)
    : block_size_(block_size), caching_(enable_prefix_caching), pool_(num_blocks, enable_prefix_caching) {
  VT_CHECK(block_size > 0, "KvCacheManager: block size ", block_size);
  if (num_state_slots > 0) {
    VT_CHECK(!enable_prefix_caching, "KvCacheManager: prefix caching cannot be used with recurrent state slots");
    state_.emplace(num_state_slots);
  }
}

void KvCacheManager::UpdateBlockHashes(Request& req) const {
  const size_t full = req.all_tokens.size() / static_cast<size_t>(block_size_);
  while (req.block_hashes.size() < full) {
    const size_t i = req.block_hashes.size();
    const std::span<const int32_t> tokens(req.all_tokens.data() + i * static_cast<size_t>(block_size_),
                                          static_cast<size_t>(block_size_));
    const std::optional<BlockHash> parent =
        i == 0 ? std::nullopt : std::optional<BlockHash>(req.block_hashes[i - 1]);
    req.block_hashes.push_back(HashBlock(parent, tokens, i == 0 ? std::string_view(req.cache_salt) : ""));
  }
}

ComputedBlocks KvCacheManager::GetComputedBlocks(Request& req) {
  ComputedBlocks out;
  if (!caching_) return out;
  UpdateBlockHashes(req);
  // At most num_tokens - 1 tokens may hit: the last one is computed to give the logits.
  const size_t max_blocks = static_cast<size_t>((req.num_tokens() - 1) / block_size_);
  for (size_t i = 0; i < std::min(max_blocks, req.block_hashes.size()); ++i) {
    const std::optional<int32_t> b = pool_.Lookup(req.block_hashes[i]);
    if (!b) break;
    out.blocks.push_back(*b);
  }
  out.num_tokens = static_cast<int64_t>(out.blocks.size()) * block_size_;
  queries_ += static_cast<uint64_t>(req.num_tokens());
  hits_ += static_cast<uint64_t>(out.num_tokens);
  return out;
}

std::optional<std::vector<int32_t>> KvCacheManager::AllocateSlots(Request& req, int64_t num_new_tokens,
                                                                  const ComputedBlocks* computed) {
  VT_CHECK(num_new_tokens > 0, "AllocateSlots: ", num_new_tokens, " new tokens");
  Table& table = tables_[req.id];
  const int64_t hit_tokens = computed ? computed->num_tokens : 0;
  const int64_t hit_blocks = computed ? static_cast<int64_t>(computed->blocks.size()) : 0;
  const int64_t total = req.num_computed_tokens + hit_tokens + num_new_tokens;
  const int64_t need = BlocksFor(total) - static_cast<int64_t>(table.blocks.size()) - hit_blocks;
  // Hit blocks with no reference sit in the free queue: touching them takes them out of it.
  int64_t evictable_hits = 0;
  if (computed)
    for (int32_t b : computed->blocks) evictable_hits += pool_.ref_count(b) == 0 ? 1 : 0;
  const bool needs_slot = state_ && state_->SlotOf(req.id) < 0;
  if (need > pool_.num_free_blocks() - evictable_hits || (needs_slot && state_->num_free() == 0)) {
    if (table.blocks.empty()) tables_.erase(req.id);
    return std::nullopt;
  }
  if (needs_slot) state_->Acquire(req.id);
  std::vector<int32_t> added;
  if (computed && hit_blocks > 0) {
    pool_.Touch(computed->blocks);
    added = computed->blocks;
    table.blocks.insert(table.blocks.end(), computed->blocks.begin(), computed->blocks.end());
    table.num_cached = table.blocks.size();  // hits are cached blocks already
  }
  if (need > 0) {
    const std::vector<int32_t> fresh = pool_.Allocate(need);
    added.insert(added.end(), fresh.begin(), fresh.end());
    table.blocks.insert(table.blocks.end(), fresh.begin(), fresh.end());
  }
  if (caching_) {
    UpdateBlockHashes(req);
    const size_t full = static_cast<size_t>(std::min(total, req.num_tokens()) / block_size_);
    for (size_t i = table.num_cached; i < std::min(full, req.block_hashes.size()); ++i)
      pool_.Cache(table.blocks[i], req.block_hashes[i]);
    table.num_cached = std::max(table.num_cached, std::min(full, req.block_hashes.size()));
  }
  return added;
}

void KvCacheManager::Free(const Request& req) {
  if (state_) state_->Release(req.id);
  auto it = tables_.find(req.id);
  if (it == tables_.end()) return;
  std::vector<int32_t> reversed(it->second.blocks.rbegin(), it->second.blocks.rend());
  pool_.Free(reversed);
  tables_.erase(it);
}

const std::vector<int32_t>& KvCacheManager::BlockTable(const std::string& request_id) const {
  auto it = tables_.find(request_id);
  VT_CHECK(it != tables_.end(), "KvCacheManager: request ", request_id, " has no blocks");
  return it->second.blocks;
}

}  // namespace vtllm::engine
