#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tokenizer_error.h"
#include "tokenizer/utf8.h"

namespace vtllm::tok {
namespace {

// Unicode White_Space, the set Oniguruma's and Rust's `\s` match.
constexpr std::string_view kSpaceSet =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";
// Oniguruma's Unicode `\w`: letters, marks, numbers, connector punctuation.
constexpr std::string_view kWordSet = "\\p{L}\\p{M}\\p{N}\\p{Pc}";

// Rewrites the class shorthands whose PCRE2 meaning differs from Oniguruma's.
std::string Translate(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      std::string_view set;
      bool negate = false;
      switch (e) {
        case 's': set = kSpaceSet; break;
        case 'S': set = kSpaceSet; negate = true; break;
        case 'w': set = kWordSet; break;
        case 'W': set = kWordSet; negate = true; break;
        case 'd': set = "\\p{Nd}"; break;
        default: break;
      }
      if (set.empty() || (negate && in_class)) {
        // Left to PCRE2; a negated shorthand inside a class cannot be spelled as a set union.
        out += '\\';
        out += e;
      } else if (in_class) {
        out += set;
      } else {
        out += negate ? "[^" : "[";
        out += set;
        out += ']';
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      // POSIX class [:alpha:] inside a class.
      const size_t end = p.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

struct MatchScratch {
  pcre2_match_data* md = nullptr;
  pcre2_match_context* mc = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchScratch() {
    md = pcre2_match_data_create(1, nullptr);
    mc = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (mc && stack) pcre2_jit_stack_assign(mc, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
  }
};

MatchScratch& Scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal, std::string_view path) {
  translated_ = literal ? std::string(pattern) : Translate(pattern);
  uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
  if (literal) options |= PCRE2_LITERAL;
  // Reject invalid UTF-8 in the pattern ourselves (PCRE2_NO_UTF_CHECK skips its own check).
  if (!IsValidUtf8(translated_)) {
    throw TokenizerError("tokenizer.json: " + std::string(path) + ": pattern is not valid UTF-8");
  }
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated_.data()),
                                   translated_.size(), options, &err, &err_off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw TokenizerError("tokenizer.json: " + std::string(path) + ": cannot compile regex \"" +
                         std::string(pattern.substr(0, 200)) + "\": " +
                         reinterpret_cast<const char*>(msg) + " at offset " +
                         std::to_string(err_off));
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::FindAll(std::string_view subject,
                    std::vector<std::pair<size_t, size_t>>& out) const {
  MatchScratch& s = Scratch();
  if (!s.md || !s.mc) throw TokenizerError("regex: out of memory");
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const size_t n = subject.size();
  size_t pos = 0;
  while (pos <= n) {
    const int rc = jit_ ? pcre2_jit_match(code, subj, n, pos, 0, s.md, s.mc)
                        : pcre2_match(code, subj, n, pos, PCRE2_NO_UTF_CHECK, s.md, s.mc);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      throw TokenizerError(std::string("regex match failed: ") +
                           reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    const size_t start = ov[0], end = ov[1];
    if (end < start) return;  // \K in a lookaround; not produced by tokenizer patterns
    out.emplace_back(start, end);
    if (end > start) {
      pos = end;
    } else {
      if (end >= n) return;
      pos = end + Utf8Len(static_cast<unsigned char>(subject[end]));
    }
  }
}

}  // namespace vtllm::tok
