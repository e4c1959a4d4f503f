#include "tokenizer/added_vocabulary.h"

#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace vtllm::tok {

void AddedTokenMatcher::Build(const std::vector<const AddedToken*>& tokens) {
  tokens_.clear();
  nodes_.assign(1, Node{});
  edges_.clear();
  for (const AddedToken* t : tokens) {
    if (t->content.empty()) continue;
    int32_t node = 0;
    for (const char c : t->content) {
      const uint64_t key = (uint64_t(node) << 8) | static_cast<unsigned char>(c);
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        nodes_.push_back(Node{});
        it = edges_.emplace(key, static_cast<int32_t>(nodes_.size() - 1)).first;
      }
      node = it->second;
    }
    // The first token with a given content wins, as in tokenizers' pattern order.
    if (nodes_[node].token < 0) {
      nodes_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(t);
    }
    first_byte_[static_cast<unsigned char>(t->content[0])] = true;
  }
}

const AddedToken* AddedTokenMatcher::LongestAt(std::string_view text, size_t pos,
                                               size_t& len) const {
  const AddedToken* best = nullptr;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find((uint64_t(node) << 8) | static_cast<unsigned char>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (nodes_[node].token >= 0) {
      best = tokens_[nodes_[node].token];
      len = i + 1 - pos;
    }
  }
  return best;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>& out) const {
  if (tokens_.empty()) {
    if (!text.empty()) out.push_back({text, -1});
    return;
  }
  size_t emitted = 0;  // end of the text already emitted
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t len = 0;
    const AddedToken* t = LongestAt(text, pos, len);
    if (!t) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;  // matching resumes after the match even when it is discarded
    if (t->single_word) {
      bool word_before = false, word_after = false;
      if (start > 0) {
        size_t s;
        word_before = IsWordChar(PrevCodePoint(text, start, s));
      }
      if (stop < text.size()) {
        size_t i = stop;
        word_after = IsWordChar(NextCodePoint(text, i));
      }
      if (word_before || word_after) continue;
    }
    if (t->lstrip) {
      while (start > emitted) {
        size_t s;
        if (!IsWhiteSpace(PrevCodePoint(text, start, s))) break;
        start = s;
      }
    }
    if (t->rstrip) {
      while (stop < text.size()) {
        size_t i = stop;
        if (!IsWhiteSpace(NextCodePoint(text, i))) break;
        stop = i;
      }
      pos = stop;
    }
    if (start > emitted) out.push_back({text.substr(emitted, start - emitted), -1});
    out.push_back({text.substr(start, stop - start), t->id});
    emitted = stop;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
}

}  // namespace vtllm::tok
