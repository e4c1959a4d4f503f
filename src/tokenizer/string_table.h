// A compact string -> id hash table: keys packed in one buffer, open addressing with the hash
// kept in the slot. Built once at load time for the vocabularies (100k+ entries), where
// std::unordered_map's per-node allocations dominated the load time.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace vtllm::tok {

class StringIdTable {
 public:
  void Reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    if (cap > slots_.size()) Rehash(cap);
  }

  // Inserts `key`, or overwrites its id when present.
  void Put(std::string_view key, int32_t id) {
    if ((size_ + 1) * 2 > slots_.size()) Rehash(slots_.empty() ? 16 : slots_.size() * 2);
    const uint64_t h = Hash(key);
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.len == kEmpty) {
        s = {static_cast<uint32_t>(h), id, static_cast<uint32_t>(blob_.size()),
             static_cast<uint32_t>(key.size())};
        blob_.append(key);
        ++size_;
        return;
      }
      if (Matches(s, h, key)) {
        s.id = id;
        return;
      }
    }
  }

  const int32_t* Find(std::string_view key) const {
    if (slots_.empty()) return nullptr;
    const uint64_t h = Hash(key);
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.len == kEmpty) return nullptr;
      if (Matches(s, h, key)) return &s.id;
    }
  }

  size_t size() const { return size_; }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Slot {
    uint32_t hash;
    int32_t id;
    uint32_t off;
    uint32_t len;
  };

  static uint64_t Hash(std::string_view s) { return std::hash<std::string_view>{}(s); }

  bool Matches(const Slot& s, uint64_t h, std::string_view key) const {
    return s.hash == static_cast<uint32_t>(h) && s.len == key.size() &&
           std::memcmp(blob_.data() + s.off, key.data(), key.size()) == 0;
  }

  void Rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{0, 0, 0, kEmpty});
    mask_ = cap - 1;
    for (const Slot& s : old) {
      if (s.len == kEmpty) continue;
      const uint64_t h = Hash(std::string_view(blob_).substr(s.off, s.len));
      uint64_t i = h & mask_;
      while (slots_[i].len != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::string blob_;
  size_t size_ = 0;
  uint64_t mask_ = 0;
};

}  // namespace vtllm::tok
