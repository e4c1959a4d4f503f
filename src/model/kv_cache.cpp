#include "model/kv_cache.h"

#include <algorithm>

#include "vt/error.h"

namespace vtllm::model {

int64_t KvCacheSpec::BytesPerBlock() const {
  return 2 * num_layers * block_size * num_kv_heads * head_dim * static_cast<int64_t>(vt::DTypeSize(dtype));
}

KvCacheTensors::KvCacheTensors(const KvCacheSpec& spec) : spec_(spec) {
  VT_CHECK(spec.num_layers > 0 && spec.num_kv_heads > 0 && spec.head_dim > 0 && spec.block_size > 0 &&
               spec.num_blocks > 0,
           "KvCache: every size must be > 0 (layers ", spec.num_layers, ", kv heads ", spec.num_kv_heads,
           ", head_dim ", spec.head_dim, ", block_size ", spec.block_size, ", blocks ", spec.num_blocks, ")");
  VT_CHECK(spec.num_blocks <= INT32_MAX, "KvCache: ", spec.num_blocks, " blocks do not fit I32 block ids");
  const vt::Shape shape = {spec.num_blocks, spec.block_size, spec.num_kv_heads, spec.head_dim};
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    keys_.push_back(vt::Tensor::Empty(shape, spec.dtype, spec.device));
    values_.push_back(vt::Tensor::Empty(shape, spec.dtype, spec.device));
  }
}

KvCache::KvCache(const KvCacheSpec& spec) : tensors_(spec) {
  free_.reserve(static_cast<size_t>(spec.num_blocks));
  for (int64_t b = spec.num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

void KvCache::Reserve(SequenceKv& seq, int64_t new_tokens) {
  VT_CHECK(new_tokens >= 0, "KvCache::Reserve: negative token count ", new_tokens);
  const int64_t need = BlocksFor(seq.num_tokens + new_tokens) - static_cast<int64_t>(seq.block_table.size());
  if (need <= 0) return;
  VT_CHECK(need <= num_free_blocks(), "KvCache: a sequence of ", seq.num_tokens, " tokens needs ", need,
           " more blocks of ", spec().block_size, " tokens for ", new_tokens, " new tokens, but only ",
           num_free_blocks(), " of ", spec().num_blocks, " are free");
  for (int64_t i = 0; i < need; ++i) {
    seq.block_table.push_back(free_.back());
    free_.pop_back();
  }
}

void KvCache::Release(SequenceKv& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) free_.push_back(*it);
  seq.block_table.clear();
  seq.num_tokens = 0;
}

int64_t KvCache::SlotOf(const SequenceKv& seq, int64_t pos) const {
  const int64_t bs = spec().block_size;
  const int64_t b = pos / bs;
  VT_CHECK(pos >= 0 && b < static_cast<int64_t>(seq.block_table.size()), "KvCache: position ", pos,
           " is outside the sequence's ", seq.block_table.size(), " blocks of ", bs, " tokens");
  return static_cast<int64_t>(seq.block_table[static_cast<size_t>(b)]) * bs + pos % bs;
}

}  // namespace vtllm::model
