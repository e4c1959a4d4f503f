// Token masks: a depth-first walk of the vocabulary's byte trie that advances the matcher one
// byte per edge and prunes a subtree as soon as its prefix is refused, so a step costs the
// trie nodes the grammar keeps alive, not the whole vocabulary. Inside a free string the walk
// skips every token made of plain string bytes and whole UTF-8 characters (they cannot change
// the state): those are allowed from a precomputed bitmask and only the other tokens' trie is
// walked.
#include <algorithm>
#include <numeric>

#include "engine/request_state.h"
#include "engine/structured_output.h"
#include "vt/error.h"

namespace vtllm::engine {

namespace {

// Bytes that a free string takes without changing its state: printable ASCII but '"' and '\\',
// and complete well-formed UTF-8 characters (the rules of the matcher's string lexer).
bool StateFreeStringBytes(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      if (b < 0x20 || b == '"' || b == '\\' || b == 0x7F) return false;
      ++i;
      continue;
    }
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b == 0xE0) need = 2, lo = 0xA0;
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) need = 2;
    else if (b == 0xED) need = 2, hi = 0x9F;
    else if (b == 0xF0) need = 3, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) need = 3;
    else if (b == 0xF4) need = 3, hi = 0x8F;
    else return false;
    if (i + need >= s.size()) return false;  // a character cut off
    for (size_t k = 1; k <= need; ++k) {
      const uint8_t c = static_cast<uint8_t>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return false;
    }
    i += need + 1;
  }
  return true;
}

}  // namespace

void TokenVocabulary::Trie::Build(const std::vector<std::string>& bytes, std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return bytes[static_cast<size_t>(a)] < bytes[static_cast<size_t>(b)]; });
  nodes.clear(), edge_byte.clear(), edge_child.clear(), tokens.clear();
  // Builds the node of the ids in [lo, hi), which share their first `depth` bytes.
  auto build = [&](auto&& self, size_t lo, size_t hi, size_t depth) -> uint32_t {
    const uint32_t id = static_cast<uint32_t>(nodes.size());
    nodes.emplace_back();
    nodes[id].tok_begin = static_cast<uint32_t>(tokens.size());
    while (lo < hi && bytes[static_cast<size_t>(ids[lo])].size() == depth) tokens.push_back(ids[lo++]);
    nodes[id].tok_count = static_cast<uint32_t>(tokens.size()) - nodes[id].tok_begin;
    std::vector<std::pair<size_t, size_t>> groups;
    for (size_t i = lo; i < hi;) {
      const char c = bytes[static_cast<size_t>(ids[i])][depth];
      size_t j = i;
      while (j < hi && bytes[static_cast<size_t>(ids[j])][depth] == c) ++j;
      groups.emplace_back(i, j);
      i = j;
    }
    const uint32_t first = static_cast<uint32_t>(edge_byte.size());
    nodes[id].edge_begin = first;
    nodes[id].edge_count = static_cast<uint32_t>(groups.size());
    edge_byte.resize(first + groups.size());
    edge_child.resize(first + groups.size());
    for (size_t k = 0; k < groups.size(); ++k) {
      edge_byte[first + k] = static_cast<uint8_t>(bytes[static_cast<size_t>(ids[groups[k].first])][depth]);
      const uint32_t child = self(self, groups[k].first, groups[k].second, depth + 1);
      edge_child[first + k] = child;
    }
    return id;
  };
  build(build, 0, ids.size(), 0);
}

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes, const std::vector<bool>& special,
                                 std::set<int32_t> eos_ids, int64_t vocab_size)
    : vocab_size_(vocab_size), eos_(std::move(eos_ids)) {
  VT_CHECK(vocab_size > 0 && static_cast<int64_t>(token_bytes.size()) <= vocab_size, "TokenVocabulary: ",
           token_bytes.size(), " token strings for a vocabulary of ", vocab_size);
  bytes_ = token_bytes;
  bytes_.resize(static_cast<size_t>(vocab_size));
  in_trie_.assign(static_cast<size_t>(vocab_size), false);
  plain_mask_.assign(static_cast<size_t>(bitmask_words()), 0);
  std::vector<int32_t> all, other;
  size_t longest = 0;
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    const std::string& b = bytes_[id];
    if (b.empty() || (id < special.size() && special[id]) || eos_.count(static_cast<int32_t>(id))) continue;
    in_trie_[id] = true;
    all.push_back(static_cast<int32_t>(id));
    longest = std::max(longest, b.size());
    if (StateFreeStringBytes(b))
      plain_mask_[id / 32] |= 1u << (id % 32);
    else
      other.push_back(static_cast<int32_t>(id));
  }
  full_.Build(bytes_, std::move(all));
  special_.Build(bytes_, std::move(other));
  levels_.resize(longest + 1);
}

void TokenVocabulary::Walk(const Trie& trie, const GrammarMatcher& m, std::vector<uint32_t>& bitmask) const {
  levels_[0] = m.state();
  // Explicit stack of (node, depth, next edge).
  struct Item {
    uint32_t node, depth, edge;
  };
  std::vector<Item> stack;
  stack.reserve(64);
  stack.push_back({0, 0, 0});
  while (!stack.empty()) {
    Item& it = stack.back();
    const Trie::TrieNode& node = trie.nodes[it.node];
    if (it.edge == node.edge_count) {
      stack.pop_back();
      continue;
    }
    const uint32_t e = node.edge_begin + it.edge++;
    const uint32_t depth = it.depth;
    if (!m.Advance(levels_[depth], trie.edge_byte[e], levels_[depth + 1])) continue;
    const uint32_t child = trie.edge_child[e];
    const Trie::TrieNode& cn = trie.nodes[child];
    for (uint32_t k = 0; k < cn.tok_count; ++k) {
      const int32_t t = trie.tokens[cn.tok_begin + k];
      bitmask[static_cast<size_t>(t) / 32] |= 1u << (t % 32);
    }
    if (cn.edge_count > 0) stack.push_back({child, depth + 1, 0});
  }
}

void TokenVocabulary::FillBitmask(const GrammarMatcher& m, std::vector<uint32_t>& bitmask) const {
  bitmask.assign(static_cast<size_t>(bitmask_words()), 0);
  if (m.InFreeString(m.state())) {
    bitmask = plain_mask_;
    Walk(special_, m, bitmask);
  } else {
    Walk(full_, m, bitmask);
  }
  if (m.IsComplete())
    for (int32_t t : eos_)
      if (t >= 0 && t < vocab_size_) bitmask[static_cast<size_t>(t) / 32] |= 1u << (t % 32);
}

void PrepareGrammarMask(Request& req, const TokenVocabulary& vocab) {
  const size_t generated = static_cast<size_t>(req.num_output_tokens());
  if (req.grammar->num_tokens != generated) {
    auto fresh = std::make_unique<GrammarMatcher>(req.grammar->grammar_ptr());
    for (size_t i = 0; i < generated; ++i) {
      const int32_t t = req.all_tokens[static_cast<size_t>(req.num_prompt_tokens()) + i];
      if (t >= 0 && t < vocab.vocab_size() && !vocab.eos_ids().count(t)) fresh->AcceptBytes(vocab.bytes(t));
    }
    fresh->num_tokens = generated;
    req.grammar = std::move(fresh);
  }
  vocab.FillBitmask(*req.grammar, req.grammar_bitmask);
}

bool AdvanceGrammar(Request& req, int32_t token, const TokenVocabulary& vocab) {
  GrammarMatcher& m = *req.grammar;
  if (token < 0 || token >= vocab.vocab_size()) return false;
  if (vocab.eos_ids().count(token)) return m.IsComplete();
  const bool ok = vocab.in_trie(token) && m.AcceptBytes(vocab.bytes(token));
  if (ok) ++m.num_tokens;
  return ok && !m.IsTerminated();
}

}  // namespace vtllm::engine
