// Structured outputs (vLLM's guided decoding): a JSON schema compiled to a byte-level pushdown
// automaton, and per-step token masks over the vocabulary.
//
//   JsonGrammar   the compiled schema (immutable, shared by the children of a request)
//   GrammarMatcher the automaton's state: which bytes may come next, advanced byte by byte
//   TokenVocabulary the tokenizer's bytes per token id in a byte trie, built once per engine
//   FillTokenBitmask the tokens whose bytes keep the matcher alive (EOS when the value is complete)
//
// The schema subset: type object (properties, required, additionalProperties true / false / a
// schema), array (items, minItems, maxItems, prefixItems refused), string, number, integer,
// boolean, null, a list of types, enum, const, anyOf / oneOf (oneOf is matched as anyOf),
// $ref to "#", "#/$defs/..." or "#/definitions/..."; annotations (title, description, ...) are
// ignored and any other keyword is refused with a RequestError naming it. An object without
// additionalProperties takes no keys beyond its properties (xgrammar's strict mode), except an
// object without properties, which takes any keys.
//
// Whitespace: none or one byte (space or newline) at each place JSON allows it, between tokens
// of the value only (none before the value, none after it): bounded, so a model cannot spend its
// tokens on whitespace. Numbers are bounded so that every one parses to a finite double (an
// integer to an int64 / uint64): a number may grow while it is shorter than kMaxNumberBytes
// (integers: kMaxIntegerBytes), and has at most kMaxExponentDigits exponent digits.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace vtllm::engine {

class JsonGrammar {
 public:
  enum class Kind : uint8_t { kObject, kArray, kString, kNumber, kInteger, kLiterals, kUnion };
  struct Node {
    Kind kind = Kind::kUnion;
    std::vector<std::string> prop_names;  // JSON-escaped key bytes, without the quotes
    std::vector<int32_t> prop_nodes;
    uint64_t required = 0;                // bit i: prop_names[i] is required
    int32_t additional = -1;              // node of other keys' values; -1: no other keys
    int32_t items = -1;                   // array element node
    int64_t min_items = 0, max_items = -1;  // -1: unbounded
    std::vector<std::string> literals;    // kLiterals: the values' JSON text
    std::vector<int32_t> alts;            // kUnion: the alternatives
  };

  // Compiles a schema (JSON text); throws RequestError(field, ...) on bad or unsupported input.
  static std::shared_ptr<const JsonGrammar> FromSchema(const std::string& schema_json, const std::string& field);
  // Any JSON value (response_format json_object: any object).
  static std::shared_ptr<const JsonGrammar> AnyObject();
  static std::shared_ptr<const JsonGrammar> AnyValue();

  const std::vector<Node>& nodes() const { return nodes_; }
  int32_t root() const { return root_; }

  // Built-in nodes every grammar has.
  static constexpr int32_t kAny = 0, kAnyObject = 1, kAnyArray = 2, kAnyString = 3, kAnyNumber = 4, kAnyLiteral = 5;

 private:
  friend class SchemaCompiler;
  JsonGrammar();
  std::vector<Node> nodes_;
  int32_t root_ = kAny;
};

inline constexpr int kMaxWhitespace = 1;     // whitespace bytes at one place
inline constexpr int kMaxNumberBytes = 24;   // a number's length before it must end
inline constexpr int kMaxExponentDigits = 2;
inline constexpr int kMaxIntegerBytes = 19;  // sign included: 18 digits fit int64, 19 uint64
inline constexpr size_t kMaxNesting = 32;    // objects / arrays of "any" values nest this deep
inline constexpr size_t kMaxAlternatives = 64;  // live anyOf branches kept

// One automaton frame (plain data: states are compared and copied as values).
struct GrammarFrame {
  int32_t node = 0;
  int32_t count = 0;   // array: items; literal / key: byte position; number: bytes
  uint64_t seen = 0;   // object: properties given
  uint64_t cand = 0;   // object key / literal: candidates still matching
  uint16_t hex = 0;    // string: the \u escape's value so far
  int16_t key = -1;    // object: the property of the last key (-1: another key)
  uint8_t kind = 0, phase = 0, ws = 0, esc = 0;
  uint8_t u8need = 0, u8lo = 0, u8hi = 0, free_key = 0;
  bool operator==(const GrammarFrame&) const = default;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const JsonGrammar> grammar);

  // Advances by one byte; false (state unchanged) when the byte cannot come next.
  bool AcceptByte(uint8_t b);
  // Advances by all bytes or, when one is refused, leaves the state unchanged and returns false.
  bool AcceptBytes(std::string_view bytes);
  // The value is complete: end of sequence may come now.
  bool IsComplete() const;
  // Complete and nothing else may follow.
  bool IsTerminated() const;

  // Stacks of frames, one per live anyOf branch, flattened: stack i is frames[ends[i-1], ends[i]).
  struct State {
    std::vector<GrammarFrame> frames;
    std::vector<uint32_t> ends;
    bool operator==(const State&) const = default;
  };
  const State& state() const { return state_; }
  const JsonGrammar& grammar() const { return *grammar_; }
  // Where `in` goes on byte b, into `out` (reused); false when nowhere.
  bool Advance(const State& in, uint8_t b, State& out) const;
  bool Complete(const State& s) const;
  // The state is one stack inside a free string at a character boundary: every token of plain
  // string bytes (printable ASCII but '"' and '\\', whole UTF-8 characters) is accepted.
  bool InFreeString(const State& s) const;

  // Tokens accepted since construction (the engine keeps this in step with the output).
  size_t num_tokens = 0;
  const std::shared_ptr<const JsonGrammar>& grammar_ptr() const { return grammar_; }

 private:
  enum class StepResult { kAccept, kReject, kFork };
  StepResult Step(std::vector<GrammarFrame>& s, uint8_t b) const;
  void Push(std::vector<GrammarFrame>& stack, State& out) const;

  std::shared_ptr<const JsonGrammar> grammar_;
  State state_, scratch_;
  mutable std::vector<std::vector<GrammarFrame>> work_;
};

// The vocabulary as bytes in a trie; special tokens are left out (never allowed under a
// grammar), the end-of-sequence ids are allowed when the value is complete.
class TokenVocabulary {
 public:
  // token_bytes[id]: the decoded bytes of token id; special[id]: an added / special token.
  TokenVocabulary(const std::vector<std::string>& token_bytes, const std::vector<bool>& special,
                  std::set<int32_t> eos_ids, int64_t vocab_size);

  int64_t vocab_size() const { return vocab_size_; }
  int64_t bitmask_words() const { return (vocab_size_ + 31) / 32; }
  const std::set<int32_t>& eos_ids() const { return eos_; }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool in_trie(int32_t id) const { return in_trie_[static_cast<size_t>(id)]; }
  size_t num_trie_nodes() const { return full_.nodes.size(); }

  // bitmask[t / 32] bit t % 32: token t keeps `m` alive (bitmask_words() words). Not
  // thread-safe (scratch states are kept): the engine calls it from its one thread.
  void FillBitmask(const GrammarMatcher& m, std::vector<uint32_t>& bitmask) const;

  struct Trie {
    struct TrieNode {
      uint32_t edge_begin = 0, edge_count = 0;
      uint32_t tok_begin = 0, tok_count = 0;
    };
    std::vector<TrieNode> nodes;  // 0: the root
    std::vector<uint8_t> edge_byte;
    std::vector<uint32_t> edge_child;
    std::vector<int32_t> tokens;
    void Build(const std::vector<std::string>& bytes, std::vector<int32_t> ids);
  };

 private:
  void Walk(const Trie& trie, const GrammarMatcher& m, std::vector<uint32_t>& bitmask) const;

  int64_t vocab_size_;
  std::vector<std::string> bytes_;
  std::vector<bool> in_trie_;
  std::set<int32_t> eos_;
  Trie full_;      // every allowed token
  Trie special_;   // the other tokens (the free-string fast path walks these)
  std::vector<uint32_t> plain_mask_;  // tokens of plain string bytes and whole UTF-8 characters
  mutable std::vector<GrammarMatcher::State> levels_;
};

struct Request;

// The engine's side. Before a constrained request's draw: brings its matcher in step with its
// generated tokens (replaying them into a fresh matcher if the counts differ) and fills
// req.grammar_bitmask.
void PrepareGrammarMask(Request& req, const TokenVocabulary& vocab);
// After token was appended to req: advances the matcher. False when the token is refused or the
// value is finished (nothing but the end may follow): the request stops there.
bool AdvanceGrammar(Request& req, int32_t token, const TokenVocabulary& vocab);

}  // namespace vtllm::engine
