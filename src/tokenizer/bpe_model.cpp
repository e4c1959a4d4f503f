#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "tokenizer/byte_level.h"

namespace vtllm::tok {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

uint64_t PairKey(int32_t a, int32_t b) {
  return ((uint64_t(uint32_t(a)) << 32) | uint32_t(b)) + 1;
}

// A (possibly empty-string) member that must be empty or null: this implementation has no
// subword prefix/suffix support.
void RequireEmptyString(const Json& model, std::string_view path, const char* key) {
  const Json* v = Optional(model, path, key);
  if (!v) return;
  if (!v->is_string()) ThrowField(JoinPath(path, key), "expected a string, got " + Describe(*v));
  if (!v->get_ref<const std::string&>().empty()) {
    ThrowField(JoinPath(path, key), "unsupported option value " + Describe(*v) +
                                        " (byte-level BPE needs it empty or null)");
  }
}

}  // namespace

void BpeModel::MergeMap::Init(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  keys.assign(cap, 0);
  vals.assign(cap, 0);
  mask = cap - 1;
}

void BpeModel::MergeMap::Put(uint64_t key, uint64_t val) {
  for (uint64_t i = Mix(key) & mask;; i = (i + 1) & mask) {
    if (keys[i] == 0 || keys[i] == key) {
      keys[i] = key;  // a repeated merge keeps its last rank, as tokenizers' HashMap does
      vals[i] = val;
      return;
    }
  }
}

const uint64_t* BpeModel::MergeMap::Get(uint64_t key) const {
  for (uint64_t i = Mix(key) & mask;; i = (i + 1) & mask) {
    if (keys[i] == key) return &vals[i];
    if (keys[i] == 0) return nullptr;
  }
}

BpeModel::~BpeModel() = default;

std::unique_ptr<BpeModel> BpeModel::FromJson(
    const Json& model, std::string_view path,
    std::vector<std::pair<std::string_view, int32_t>>& vocab_out) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  RequireEmptyString(model, path, "continuing_subword_prefix");
  RequireEmptyString(model, path, "end_of_word_suffix");
  if (OptionalBool(model, path, "byte_fallback", false)) {
    ThrowField(JoinPath(path, "byte_fallback"), "unsupported option value true");
  }
  if (const Json* d = Optional(model, path, "dropout")) {
    if (!d->is_number() || d->get<double>() != 0.0) {
      ThrowField(JoinPath(path, "dropout"),
                 "unsupported option value " + Describe(*d) + " (only null or 0)");
    }
  }
  m->fuse_unk_ = OptionalBool(model, path, "fuse_unk", false);
  m->ignore_merges_ = OptionalBool(model, path, "ignore_merges", false);

  // Vocabulary: token string -> id.
  const std::string vpath = JoinPath(path, "vocab");
  const Json& vocab = Require(model, path, "vocab");
  if (!vocab.is_object()) ThrowField(vpath, "expected an object, got " + Describe(vocab));
  StringIdTable& token_to_id = m->token_to_id_;
  token_to_id.Reserve(vocab.size());
  vocab_out.reserve(vocab.size());
  m->bytes_to_id_.Reserve(vocab.size());
  std::string bytes;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id = AsTokenId(it.value(), vpath + "[\"" + it.key() + "\"]");
    token_to_id.Put(it.key(), id);
    vocab_out.emplace_back(it.key(), id);
    bytes.clear();
    if (ByteLevelDecode(it.key(), bytes)) m->bytes_to_id_.Put(bytes, id);
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    const int32_t* id = m->bytes_to_id_.Find(std::string_view(&c, 1));
    m->byte_id_[b] = id ? *id : -1;
  }
  if (const Json* unk = Optional(model, path, "unk_token")) {
    if (!unk->is_string()) ThrowField(JoinPath(path, "unk_token"), "expected a string, got " + Describe(*unk));
    const int32_t* id = token_to_id.Find(unk->get_ref<const std::string&>());
    if (!id) {
      ThrowField(JoinPath(path, "unk_token"),
                 "token \"" + unk->get<std::string>() + "\" is not in the vocabulary");
    }
    m->unk_id_ = *id;
  }

  // Merges: "a b" strings (older files) or ["a", "b"] pairs; rank = position.
  const std::string mpath = JoinPath(path, "merges");
  const Json* merges = Optional(model, path, "merges");
  if (merges && !merges->is_array()) ThrowField(mpath, "expected an array, got " + Describe(*merges));
  const size_t n = merges ? merges->size() : 0;
  m->merges_.Init(n);
  std::string joined;
  for (size_t r = 0; r < n; ++r) {
    const Json& e = (*merges)[r];
    std::string_view a, b;
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        ThrowField(mpath + "[" + std::to_string(r) + "]",
                   "expected \"left right\" (one space), got " + Describe(e));
      }
      a = std::string_view(s).substr(0, sp);
      b = std::string_view(s).substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get_ref<const std::string&>();
      b = e[1].get_ref<const std::string&>();
    } else {
      ThrowField(mpath + "[" + std::to_string(r) + "]",
                 "expected \"left right\" or [\"left\", \"right\"], got " + Describe(e));
    }
    joined.assign(a);
    joined.append(b);
    const int32_t *ia = token_to_id.Find(a), *ib = token_to_id.Find(b), *ij = token_to_id.Find(joined);
    if (!ia || !ib || !ij) {
      const std::string_view missing = !ia ? a : !ib ? b : std::string_view(joined);
      ThrowField(mpath + "[" + std::to_string(r) + "]",
                 "merge token \"" + std::string(missing) + "\" is not in the vocabulary");
    }
    m->merges_.Put(PairKey(*ia, *ib), (uint64_t(r) << 32) | uint32_t(*ij));
  }
  return m;
}

void BpeModel::MergeWord(std::string_view word, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  struct Cand {
    uint32_t rank;
    int32_t pos;  // index of the left symbol
    int32_t left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Sym> syms;
  thread_local std::vector<Cand> heap_storage;
  syms.clear();
  for (const char c : word) {
    int32_t id = byte_id_[static_cast<unsigned char>(c)];
    if (id < 0) {
      if (unk_id_ < 0) continue;  // tokenizers drops characters it cannot represent
      if (fuse_unk_ && !syms.empty() && syms.back().id == unk_id_) continue;
      id = unk_id_;
    }
    const int32_t k = static_cast<int32_t>(syms.size());
    syms.push_back({id, k - 1, -1, true});
    if (k > 0) syms[k - 1].next = k;
  }
  if (syms.empty()) return;

  // Min-heap on (rank, pos) kept in a reusable vector.
  std::vector<Cand>& heap = heap_storage;
  heap.clear();
  const auto cmp = std::greater<>{};
  auto push = [&](int32_t pos) {
    const int32_t nx = syms[pos].next;
    if (nx < 0) return;
    if (const uint64_t* v = merges_.Get(PairKey(syms[pos].id, syms[nx].id))) {
      heap.push_back({static_cast<uint32_t>(*v >> 32), pos, syms[pos].id, syms[nx].id});
      std::push_heap(heap.begin(), heap.end(), cmp);
    }
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(syms.size()); ++k) push(k);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    const Cand c = heap.back();
    heap.pop_back();
    Sym& l = syms[c.pos];
    if (!l.alive || l.id != c.left || l.next < 0) continue;
    Sym& r = syms[l.next];
    if (r.id != c.right) continue;
    const uint64_t* v = merges_.Get(PairKey(c.left, c.right));
    l.id = static_cast<int32_t>(*v & 0xFFFFFFFFu);
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.pos;
    if (l.prev >= 0) push(l.prev);
    push(c.pos);
  }
  for (int32_t k = 0; k >= 0; k = syms[k].next) out.push_back(syms[k].id);
}

void BpeModel::Encode(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const int32_t* id = bytes_to_id_.Find(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (word.size() == 1) {
    const int32_t id = byte_id_[static_cast<unsigned char>(word[0])];
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (word.size() > kMaxCachedWordLen) {
    MergeWord(word, out);
    return;
  }
  const uint64_t h = std::hash<std::string_view>{}(word);
  CacheShard& shard = cache_[(h >> 56) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    if (shard.Lookup(h, word, out)) return;
  }
  const size_t before = out.size();
  MergeWord(word, out);
  std::lock_guard<std::mutex> lock(shard.mu);
  shard.Insert(h, word, out.data() + before, out.size() - before);
}

bool BpeModel::CacheShard::Lookup(uint64_t h, std::string_view word,
                                  std::vector<int32_t>& out) const {
  if (slots.empty()) return false;
  const size_t mask = slots.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots[i];
    if (!s.used) return false;
    if (s.hash == h && s.key_len == word.size() &&
        std::memcmp(keys.data() + s.key_off, word.data(), word.size()) == 0) {
      out.insert(out.end(), ids.begin() + s.ids_off, ids.begin() + s.ids_off + s.ids_len);
      return true;
    }
  }
}

void BpeModel::CacheShard::Insert(uint64_t h, std::string_view word, const int32_t* p, size_t n) {
  constexpr size_t kPerShard = kCacheCapacity / kCacheShards;
  if (count >= kPerShard || n > UINT16_MAX || word.size() > UINT16_MAX) return;
  if (slots.empty()) slots.resize(kPerShard * 2);
  const size_t mask = slots.size() - 1;
  size_t i = h & mask;
  for (;; i = (i + 1) & mask) {
    const Slot& s = slots[i];
    if (!s.used) break;
    if (s.hash == h && s.key_len == word.size() &&
        std::memcmp(keys.data() + s.key_off, word.data(), word.size()) == 0) {
      return;  // another thread cached it meanwhile
    }
  }
  slots[i] = {h, static_cast<uint32_t>(keys.size()), static_cast<uint32_t>(ids.size()),
              static_cast<uint16_t>(word.size()), static_cast<uint16_t>(n), true};
  keys.append(word);
  ids.insert(ids.end(), p, p + n);
  ++count;
}

}  // namespace vtllm::tok
