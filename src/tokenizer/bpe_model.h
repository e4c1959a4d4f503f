// tokenizer.json "model" of type BPE over bytes (byte-level BPE, as GPT-2, Llama 3 and Qwen use).
//
// Words arrive as raw UTF-8 bytes; each byte starts as the vocabulary entry of its byte-level
// character, then merges apply lowest rank first (leftmost first among equal ranks), exactly the
// order of tokenizers' priority-queue implementation. Results for words up to kMaxCachedWordLen
// bytes are kept in a bounded, thread-safe cache.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_util.h"
#include "tokenizer/string_table.h"

namespace vtllm::tok {


class BpeModel {
 public:
  // Parses `model` (the tokenizer.json "model" object at `path`). `vocab_out` receives the
  // (token string, id) pairs, viewing strings inside `model`.
  static std::unique_ptr<BpeModel> FromJson(
      const Json& model, std::string_view path,
      std::vector<std::pair<std::string_view, int32_t>>& vocab_out);
  ~BpeModel();

  const StringIdTable& vocab() const { return token_to_id_; }
  // Appends the ids of `word` (raw bytes, non-empty) to `out`.
  void Encode(std::string_view word, std::vector<int32_t>& out) const;

  static constexpr size_t kMaxCachedWordLen = 256;
  static constexpr size_t kCacheCapacity = 1 << 16;

 private:
  BpeModel() = default;
  void MergeWord(std::string_view word, std::vector<int32_t>& out) const;

  // Open-addressing map (a_id, b_id) -> (rank, merged id).
  struct MergeMap {
    std::vector<uint64_t> keys;  // (a << 32 | b) + 1; 0 marks an empty slot
    std::vector<uint64_t> vals;  // rank << 32 | merged id
    uint64_t mask = 0;
    void Init(size_t n);
    void Put(uint64_t key, uint64_t val);
    const uint64_t* Get(uint64_t key) const;
  };

  // Word -> ids cache: per shard, an open-addressing table over packed key and id buffers.
  // Fills up to its capacity and then keeps what it has (no eviction), like tokenizers' cache.
  struct CacheShard {
    struct Slot {
      uint64_t hash = 0;
      uint32_t key_off = 0, ids_off = 0;
      uint16_t key_len = 0, ids_len = 0;
      bool used = false;
    };
    std::mutex mu;
    std::vector<Slot> slots;  // capacity 2x the entries allowed
    std::string keys;
    std::vector<int32_t> ids;
    size_t count = 0;
    // Appends the cached ids of `word` to `out`; false when absent.
    bool Lookup(uint64_t h, std::string_view word, std::vector<int32_t>& out) const;
    void Insert(uint64_t h, std::string_view word, const int32_t* ids, size_t n);
  };
  static constexpr size_t kCacheShards = 16;

  StringIdTable token_to_id_;  // vocabulary keyed by the token string (byte-level spelling)
  StringIdTable bytes_to_id_;  // vocabulary keyed by the bytes a token stands for
  int32_t byte_id_[256] = {};  // id of each single byte, -1 if the vocabulary lacks it
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  MergeMap merges_;
  mutable CacheShard cache_[kCacheShards];
};

}  // namespace vtllm::tok
