// The byte-level pushdown automaton of a JsonGrammar. A state is a set of stacks (one per live
// anyOf branch); a stack's top frame reads the next byte or, when its value can end there and
// the byte does not continue it, pops and hands the byte to the frame below.
#include <algorithm>

#include "engine/structured_output.h"

namespace vtllm::engine {

namespace {

using Frame = GrammarFrame;
using Kind = JsonGrammar::Kind;

enum FrameKind : uint8_t { kValue, kObject, kArray, kString, kNumber, kLiteral };
// Object phases.
enum : uint8_t { kObjStart, kObjKey, kObjAfterKey, kObjAfterColon, kObjAfterValue, kObjAfterComma };
// Array phases.
enum : uint8_t { kArrStart, kArrAfterValue, kArrAfterComma };
// Number phases: after nothing, '-', '0', int digits, '.', fraction digits, 'e', exponent sign,
// exponent digits.
enum : uint8_t { kNumStart, kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumE, kNumESign, kNumExp };

bool IsWs(uint8_t b) { return b == ' ' || b == '\n'; }
bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }
int HexValue(uint8_t b) {
  if (IsDigit(b)) return b - '0';
  if (b >= 'a' && b <= 'f') return b - 'a' + 10;
  if (b >= 'A' && b <= 'F') return b - 'A' + 10;
  return -1;
}

enum class Lex { kReject, kInside, kClose };

// One byte inside a string (after its opening quote): escapes (with \u surrogate pairs
// complete), UTF-8 well-formed (no overlongs, no surrogates), no control bytes.
Lex LexString(Frame& f, uint8_t b) {
  if (f.u8need) {
    if (b < f.u8lo || b > f.u8hi) return Lex::kReject;
    --f.u8need, f.u8lo = 0x80, f.u8hi = 0xBF;
    return Lex::kInside;
  }
  if (f.esc == 1) {
    if (b == 'u') {
      f.esc = 2, f.hex = 0;
      return Lex::kInside;
    }
    if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
      f.esc = 0;
      return Lex::kInside;
    }
    return Lex::kReject;
  }
  if ((f.esc >= 2 && f.esc <= 5) || (f.esc >= 8 && f.esc <= 11)) {
    const int d = HexValue(b);
    if (d < 0) return Lex::kReject;
    const bool low = f.esc >= 8;
    const int pos = low ? f.esc - 8 : f.esc - 2;
    if (low && pos == 0 && d != 0xD) return Lex::kReject;      // a low surrogate must follow
    if (low && pos == 1 && d < 0xC) return Lex::kReject;
    if (!low && pos == 1 && f.hex == 0xD && d >= 0xC) return Lex::kReject;  // lone low surrogate
    f.hex = static_cast<uint16_t>(f.hex * 16 + d);
    if (pos < 3) {
      ++f.esc;
      return Lex::kInside;
    }
    f.esc = !low && (f.hex >> 10) == 0x36 ? 6 : 0;  // a high surrogate wants "\u" + a low one
    return Lex::kInside;
  }
  if (f.esc == 6) {
    if (b != '\\') return Lex::kReject;
    f.esc = 7;
    return Lex::kInside;
  }
  if (f.esc == 7) {
    if (b != 'u') return Lex::kReject;
    f.esc = 8, f.hex = 0;
    return Lex::kInside;
  }
  if (b == '"') return Lex::kClose;
  if (b == '\\') {
    f.esc = 1;
    return Lex::kInside;
  }
  if (b < 0x20) return Lex::kReject;
  if (b < 0x80) return Lex::kInside;
  f.u8lo = 0x80, f.u8hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) f.u8need = 1;
  else if (b == 0xE0) f.u8need = 2, f.u8lo = 0xA0;
  else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) f.u8need = 2;
  else if (b == 0xED) f.u8need = 2, f.u8hi = 0x9F;
  else if (b == 0xF0) f.u8need = 3, f.u8lo = 0x90;
  else if (b >= 0xF1 && b <= 0xF3) f.u8need = 3;
  else if (b == 0xF4) f.u8need = 3, f.u8hi = 0x8F;
  else return Lex::kReject;
  return Lex::kInside;
}

enum class Num { kReject, kTaken, kEnd };

bool NumberAccepting(uint8_t phase) {
  return phase == kNumZero || phase == kNumInt || phase == kNumFrac || phase == kNumExp;
}

// One byte of a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? (integers: no fraction or
// exponent), bounded so that every value fits a double (an integer an int64 / uint64). kEnd: the number is complete and the byte is not part of it.
Num NumberStep(Frame& f, uint8_t b, bool integer) {
  const bool digit = IsDigit(b);
  if (NumberAccepting(f.phase) && f.count >= (integer ? kMaxIntegerBytes : kMaxNumberBytes)) return Num::kEnd;
  auto to = [&](uint8_t p) {
    f.phase = p;
    ++f.count;
    return Num::kTaken;
  };
  switch (f.phase) {
    case kNumStart:
      if (b == '-') return to(kNumMinus);
      [[fallthrough]];
    case kNumMinus:
      if (b == '0') return to(kNumZero);
      if (digit) return to(kNumInt);
      return Num::kReject;
    case kNumInt:
      if (digit) return to(kNumInt);
      [[fallthrough]];
    case kNumZero:
      if (!integer && b == '.') return to(kNumDot);
      if (!integer && (b == 'e' || b == 'E')) return to(kNumE);
      return Num::kEnd;
    case kNumDot: return digit ? to(kNumFrac) : Num::kReject;
    case kNumFrac:
      if (digit) return to(kNumFrac);
      if (b == 'e' || b == 'E') return to(kNumE);
      return Num::kEnd;
    case kNumE:
      if (b == '+' || b == '-') return to(kNumESign);
      [[fallthrough]];
    case kNumESign:
      if (!digit) return Num::kReject;
      f.hex = 1;  // exponent digits
      return to(kNumExp);
    case kNumExp:
      if (!digit || f.hex >= kMaxExponentDigits) return Num::kEnd;
      ++f.hex;
      return to(kNumExp);
  }
  return Num::kReject;
}

// The frame's value may end here (a complete number, a literal that is fully matched).
bool CanEnd(const Frame& f, const JsonGrammar& g) {
  if (f.kind == kNumber) return NumberAccepting(f.phase);
  if (f.kind == kLiteral) {
    const auto& lits = g.nodes()[static_cast<size_t>(f.node)].literals;
    for (uint64_t c = f.cand; c; c &= c - 1)
      if (lits[static_cast<size_t>(__builtin_ctzll(c))].size() == static_cast<size_t>(f.count)) return true;
  }
  return false;
}

Frame ValueFrame(int32_t node) {
  Frame f;
  f.kind = kValue;
  f.node = node;
  return f;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const JsonGrammar> grammar) : grammar_(std::move(grammar)) {
  state_.frames.push_back(ValueFrame(grammar_->root()));
  state_.ends.push_back(1);
}

GrammarMatcher::StepResult GrammarMatcher::Step(std::vector<GrammarFrame>& s, uint8_t b) const {
  const JsonGrammar& g = *grammar_;
  while (true) {
    if (s.empty()) return StepResult::kReject;  // the value is complete: only the end may follow
    Frame& f = s.back();
    const JsonGrammar::Node& n = g.nodes()[static_cast<size_t>(f.node)];
    switch (f.kind) {
      case kValue: {
        if (n.kind == Kind::kUnion) return StepResult::kFork;
        Frame c;
        c.node = f.node;
        switch (n.kind) {
          case Kind::kObject:
          case Kind::kArray:
            if (b != (n.kind == Kind::kObject ? '{' : '[')) return StepResult::kReject;
            if (s.size() > kMaxNesting && (n.additional == JsonGrammar::kAny || n.items == JsonGrammar::kAny))
              return StepResult::kReject;
            c.kind = n.kind == Kind::kObject ? kObject : kArray;
            f = c;
            return StepResult::kAccept;
          case Kind::kString:
            if (b != '"') return StepResult::kReject;
            c.kind = kString;
            f = c;
            return StepResult::kAccept;
          case Kind::kNumber:
          case Kind::kInteger: c.kind = kNumber; break;
          case Kind::kLiterals:
            c.kind = kLiteral;
            c.cand = n.literals.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << n.literals.size()) - 1;
            break;
          case Kind::kUnion: break;
        }
        f = c;
        continue;  // the number / literal reads b
      }
      case kString: {
        const Lex r = LexString(f, b);
        if (r == Lex::kReject) return StepResult::kReject;
        if (r == Lex::kClose) s.pop_back();
        return StepResult::kAccept;
      }
      case kNumber: {
        const Num r = NumberStep(f, b, n.kind == Kind::kInteger);
        if (r == Num::kReject) return StepResult::kReject;
        if (r == Num::kTaken) return StepResult::kAccept;
        s.pop_back();
        continue;
      }
      case kLiteral: {
        uint64_t next = 0;
        bool longer = false;
        const size_t pos = static_cast<size_t>(f.count);
        for (uint64_t c = f.cand; c; c &= c - 1) {
          const std::string& lit = n.literals[static_cast<size_t>(__builtin_ctzll(c))];
          if (lit.size() > pos && static_cast<uint8_t>(lit[pos]) == b) {
            next |= c & (~c + 1);
            longer = longer || lit.size() > pos + 1;
          }
        }
        if (next) {
          f.cand = next;
          ++f.count;
          if (!longer) s.pop_back();  // every candidate left is matched in full
          return StepResult::kAccept;
        }
        if (!CanEnd(f, g)) return StepResult::kReject;
        s.pop_back();
        continue;
      }
      case kArray: {
        if (IsWs(b)) {
          if (f.ws >= kMaxWhitespace) return StepResult::kReject;
          ++f.ws;
          return StepResult::kAccept;
        }
        if (f.phase == kArrStart || f.phase == kArrAfterValue) {
          if (b == ']') {
            if (f.count < n.min_items) return StepResult::kReject;
            s.pop_back();
            return StepResult::kAccept;
          }
        }
        if (f.phase == kArrAfterValue) {
          if (b != ',' || (n.max_items >= 0 && f.count >= n.max_items)) return StepResult::kReject;
          f.phase = kArrAfterComma, f.ws = 0;
          return StepResult::kAccept;
        }
        if (f.phase == kArrStart && n.max_items == 0) return StepResult::kReject;
        ++f.count;
        f.phase = kArrAfterValue, f.ws = 0;
        s.push_back(ValueFrame(n.items));
        continue;
      }
      case kObject: {
        const uint64_t all = n.prop_names.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << n.prop_names.size()) - 1;
        const uint64_t unseen = all & ~f.seen;
        if (f.phase == kObjKey) {
          const size_t pos = static_cast<size_t>(f.count);
          if (f.free_key) {
            const Lex r = LexString(f, b);
            if (r == Lex::kReject) return StepResult::kReject;
            if (r == Lex::kClose) {
              f.key = -1;
              for (uint64_t c = f.cand; c; c &= c - 1)
                if (n.prop_names[static_cast<size_t>(__builtin_ctzll(c))].size() == pos)
                  f.key = static_cast<int16_t>(__builtin_ctzll(c));
              f.phase = kObjAfterKey, f.ws = 0;
              return StepResult::kAccept;
            }
          } else if (b == '"') {
            for (uint64_t c = f.cand; c; c &= c - 1) {
              if (n.prop_names[static_cast<size_t>(__builtin_ctzll(c))].size() == pos) {
                f.key = static_cast<int16_t>(__builtin_ctzll(c));
                f.phase = kObjAfterKey, f.ws = 0;
                return StepResult::kAccept;
              }
            }
            return StepResult::kReject;
          }
          uint64_t next = 0;
          for (uint64_t c = f.cand; c; c &= c - 1) {
            const std::string& name = n.prop_names[static_cast<size_t>(__builtin_ctzll(c))];
            if (name.size() > pos && static_cast<uint8_t>(name[pos]) == b) next |= c & (~c + 1);
          }
          if (!next && !f.free_key) return StepResult::kReject;
          f.cand = next;
          ++f.count;
          return StepResult::kAccept;
        }
        if (IsWs(b) && f.phase != kObjKey) {
          if (f.ws >= kMaxWhitespace) return StepResult::kReject;
          ++f.ws;
          return StepResult::kAccept;
        }
        const bool more_keys = n.additional != -1 || unseen != 0;
        switch (f.phase) {
          case kObjStart:
          case kObjAfterValue:
            if (b == '}') {
              if ((n.required & ~f.seen) != 0) return StepResult::kReject;
              s.pop_back();
              return StepResult::kAccept;
            }
            if (f.phase == kObjAfterValue) {
              if (b != ',' || !more_keys) return StepResult::kReject;
              f.phase = kObjAfterComma, f.ws = 0;
              return StepResult::kAccept;
            }
            [[fallthrough]];
          case kObjAfterComma:
            if (b != '"' || !more_keys) return StepResult::kReject;
            f.phase = kObjKey, f.ws = 0, f.count = 0, f.cand = unseen, f.key = -1;
            f.free_key = n.additional != -1, f.esc = 0, f.u8need = 0;
            return StepResult::kAccept;
          case kObjAfterKey:
            if (b != ':') return StepResult::kReject;
            f.phase = kObjAfterColon, f.ws = 0;
            return StepResult::kAccept;
          case kObjAfterColon: {
            int32_t child = n.additional;
            if (f.key >= 0) {
              child = n.prop_nodes[static_cast<size_t>(f.key)];
              f.seen |= uint64_t{1} << f.key;
            }
            f.phase = kObjAfterValue, f.ws = 0;
            s.push_back(ValueFrame(child));
            continue;
          }
          default: return StepResult::kReject;
        }
      }
    }
    return StepResult::kReject;
  }
}

void GrammarMatcher::Push(std::vector<GrammarFrame>& stack, State& out) const {
  // Drop a duplicate of a stack already in `out` (branches that have converged).
  uint32_t begin = 0;
  for (uint32_t end : out.ends) {
    if (end - begin == stack.size() && std::equal(stack.begin(), stack.end(), out.frames.begin() + begin)) return;
    begin = end;
  }
  if (out.ends.size() >= kMaxAlternatives) return;
  out.frames.insert(out.frames.end(), stack.begin(), stack.end());
  out.ends.push_back(static_cast<uint32_t>(out.frames.size()));
}

bool GrammarMatcher::Advance(const State& in, uint8_t b, State& out) const {
  out.frames.clear();
  out.ends.clear();
  uint32_t begin = 0;
  size_t expansions = 0;
  for (uint32_t end : in.ends) {
    work_.resize(1);
    work_[0].assign(in.frames.begin() + begin, in.frames.begin() + end);
    begin = end;
    while (!work_.empty()) {
      std::vector<GrammarFrame> s = std::move(work_.back());
      work_.pop_back();
      const StepResult r = Step(s, b);
      if (r == StepResult::kAccept) {
        Push(s, out);
      } else if (r == StepResult::kFork) {
        // Each alternative of the union replaces the top frame and reads the byte again.
        if (++expansions > 4 * kMaxAlternatives) continue;  // a cycle of references: give up the branch
        const auto& alts = grammar_->nodes()[static_cast<size_t>(s.back().node)].alts;
        for (auto it = alts.rbegin(); it != alts.rend(); ++it) {
          work_.push_back(s);
          work_.back().back().node = *it;
        }
      }
    }
  }
  return !out.ends.empty();
}

bool GrammarMatcher::AcceptByte(uint8_t b) {
  if (!Advance(state_, b, scratch_)) return false;
  std::swap(state_, scratch_);
  return true;
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  State saved = state_;
  for (char c : bytes) {
    if (!AcceptByte(static_cast<uint8_t>(c))) {
      state_ = std::move(saved);
      return false;
    }
  }
  return true;
}

bool GrammarMatcher::Complete(const State& s) const {
  uint32_t begin = 0;
  for (uint32_t end : s.ends) {
    if (end == begin) return true;
    if (end - begin == 1 && CanEnd(s.frames[begin], *grammar_)) return true;
    begin = end;
  }
  return false;
}

bool GrammarMatcher::IsComplete() const { return Complete(state_); }

bool GrammarMatcher::IsTerminated() const {
  uint32_t begin = 0;
  for (uint32_t end : state_.ends) {
    if (end != begin) return false;
    begin = end;
  }
  return !state_.ends.empty();
}

bool GrammarMatcher::InFreeString(const State& s) const {
  if (s.ends.size() != 1 || s.frames.empty()) return false;
  const GrammarFrame& f = s.frames.back();
  return f.kind == kString && f.esc == 0 && f.u8need == 0;
}

}  // namespace vtllm::engine
