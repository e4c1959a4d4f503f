// Added tokens (tokenizer.json "added_tokens"): found in the text before pre-tokenization and
// emitted as single ids, with tokenizers' semantics: leftmost-longest matching, tokens with
// normalized=false matched on the raw text and tokens with normalized=true on the normalized
// text, single_word requiring no word character on either side, lstrip/rstrip absorbing the
// whitespace next to the token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vtllm::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

class AddedTokenMatcher {
 public:
  // Builds a matcher over `tokens` (pointers into storage that outlives the matcher).
  void Build(const std::vector<const AddedToken*>& tokens);
  bool empty() const { return tokens_.empty(); }

  struct Segment {
    std::string_view text;
    int32_t id;  // -1: plain text
  };
  // Splits `text` into plain-text segments and added tokens, appending to `out`.
  void Split(std::string_view text, std::vector<Segment>& out) const;

 private:
  // Longest token starting at `pos`, or nullptr.
  const AddedToken* LongestAt(std::string_view text, size_t pos, size_t& len) const;

  struct Node {
    int32_t token = -1;  // index into tokens_ of the token ending here
  };
  std::vector<const AddedToken*> tokens_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
  bool first_byte_[256] = {};
};

}  // namespace vtllm::tok
