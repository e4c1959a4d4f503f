#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace vtllm::tok {
namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior ParseBehavior(const Json& j, std::string_view path) {
  const std::string& b = RequireString(j, path, "behavior");
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  ThrowField(JoinPath(path, "behavior"), "unsupported split behavior \"" + b + "\"");
}

struct Span {
  size_t begin, end;
  bool is_match;
};

// Applies a delimiter behavior to a covering list of spans (matches and the gaps between them)
// and appends the non-empty results to `out`, as tokenizers' NormalizedString::split does.
void ApplyBehavior(std::string_view text, std::vector<Span>& spans, Behavior behavior,
                   std::vector<std::string_view>& out) {
  std::vector<Span> acc;
  acc.reserve(spans.size());
  switch (behavior) {
    case Behavior::kIsolated:
      acc = spans;
      break;
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) acc.push_back(s);
      }
      break;
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !prev_match && !acc.empty()) {
          acc.back().end = s.end;
        } else {
          acc.push_back(s);
        }
        prev_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.is_match && !prev_match && !acc.empty()) {
          acc.back().begin = s.begin;
        } else {
          acc.push_back(s);
        }
        prev_match = s.is_match;
      }
      std::reverse(acc.begin(), acc.end());
      break;
    }
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (const Span& s : spans) {
        if (s.is_match == prev_match && !acc.empty()) {
          acc.back().end = s.end;
        } else {
          acc.push_back(s);
        }
        prev_match = s.is_match;
      }
      break;
    }
  }
  for (const Span& s : acc) {
    if (s.end > s.begin) out.push_back(text.substr(s.begin, s.end - s.begin));
  }
}

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

struct PreTokenizer::Step {
  enum Kind { kSplit, kDigits, kByteLevel } kind;
  std::unique_ptr<Regex> regex;  // kSplit; kByteLevel when use_regex
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  bool individual_digits = false;
  bool add_prefix_space = false;

  void Run(std::string_view word, PreTokenizeScratch& s, std::vector<std::string_view>& out) const {
    std::vector<Span> spans;
    switch (kind) {
      case kSplit:
        SplitByRegex(word, *regex, invert, behavior, s, out);
        return;
      case kDigits: {
        // Groups of numeric characters (each alone when individual_digits) are isolated.
        size_t i = 0, start = 0;
        bool in_num = false;
        while (i < word.size()) {
          const size_t at = i;
          const bool num = IsNumeric(NextCodePoint(word, i));
          if (at > start && (num != in_num || (num && individual_digits))) {
            spans.push_back({start, at, in_num});
            start = at;
          }
          in_num = num;
        }
        if (word.size() > start) spans.push_back({start, word.size(), in_num});
        ApplyBehavior(word, spans, Behavior::kIsolated, out);
        return;
      }
      case kByteLevel: {
        std::string_view w = word;
        if (add_prefix_space && (w.empty() || w.front() != ' ')) {
          s.owned.push_back(" ");
          s.owned.back().append(w);
          w = s.owned.back();
        }
        if (regex) {
          SplitByRegex(w, *regex, false, Behavior::kIsolated, s, out);
        } else if (!w.empty()) {
          out.push_back(w);
        }
        return;
      }
    }
  }

  static void SplitByRegex(std::string_view word, const Regex& re, bool invert, Behavior behavior,
                           PreTokenizeScratch& s, std::vector<std::string_view>& out) {
    if (word.empty()) return;
    s.matches.clear();
    re.FindAll(word, s.matches);
    // Fast path for the common case: Isolated, every byte covered by a non-empty match.
    std::vector<Span> spans;
    spans.reserve(s.matches.size() * 2 + 1);
    size_t prev = 0;
    for (const auto& [b, e] : s.matches) {
      if (b > prev) spans.push_back({prev, b, invert});
      spans.push_back({b, e, !invert});
      prev = e;
    }
    if (prev < word.size()) spans.push_back({prev, word.size(), invert});
    ApplyBehavior(word, spans, behavior, out);
  }
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

PreTokenizer PreTokenizer::FromJson(const Json& j, std::string_view path) {
  PreTokenizer p;
  if (!j.is_null()) p.Parse(j, path);
  for (size_t k = 0; k + 1 < p.steps_.size(); ++k) {
    if (p.steps_[k]->kind == Step::kByteLevel) {
      ThrowField(path, "a ByteLevel pre-tokenizer followed by other steps is not supported");
    }
  }
  return p;
}

bool PreTokenizer::ends_with_byte_level() const {
  return !steps_.empty() && steps_.back()->kind == Step::kByteLevel;
}

void PreTokenizer::Parse(const Json& j, std::string_view path) {
  const std::string& type = RequireString(j, path, "type");
  auto step = std::make_unique<Step>();
  if (type == "Sequence") {
    const std::string p = JoinPath(path, "pretokenizers");
    const Json& list = Require(j, path, "pretokenizers");
    if (!list.is_array()) ThrowField(p, "expected an array, got " + Describe(list));
    for (size_t i = 0; i < list.size(); ++i) Parse(list[i], p + "[" + std::to_string(i) + "]");
    return;
  }
  if (type == "Split") {
    step->kind = Step::kSplit;
    const std::string pp = JoinPath(path, "pattern");
    const Json& pat = Require(j, path, "pattern");
    if (const Json* re = Optional(pat, pp, "Regex")) {
      if (!re->is_string()) ThrowField(pp + ".Regex", "expected a string, got " + Describe(*re));
      step->regex = std::make_unique<Regex>(re->get_ref<const std::string&>(), false, pp + ".Regex");
    } else if (const Json* lit = Optional(pat, pp, "String")) {
      if (!lit->is_string()) ThrowField(pp + ".String", "expected a string, got " + Describe(*lit));
      step->regex = std::make_unique<Regex>(lit->get_ref<const std::string&>(), true, pp + ".String");
    } else {
      ThrowField(pp, "expected {\"Regex\": ...} or {\"String\": ...}, got " + Describe(pat));
    }
    step->behavior = ParseBehavior(j, path);
    step->invert = OptionalBool(j, path, "invert", false);
  } else if (type == "Digits") {
    step->kind = Step::kDigits;
    step->individual_digits = OptionalBool(j, path, "individual_digits", false);
  } else if (type == "ByteLevel") {
    step->kind = Step::kByteLevel;
    step->add_prefix_space = OptionalBool(j, path, "add_prefix_space", true);
    if (OptionalBool(j, path, "use_regex", true)) {
      step->regex = std::make_unique<Regex>(kGpt2Pattern, false, JoinPath(path, "use_regex"));
    }
  } else {
    ThrowField(JoinPath(path, "type"), "unsupported pre_tokenizer type \"" + type +
                                           "\" (supported: Split, Digits, ByteLevel, Sequence)");
  }
  steps_.push_back(std::move(step));
}

void PreTokenizer::Run(std::string_view text, PreTokenizeScratch& s) const {
  s.words.clear();
  s.owned.clear();
  if (text.empty()) return;
  s.words.push_back(text);
  for (const auto& step : steps_) {
    s.next.clear();
    for (const std::string_view w : s.words) step->Run(w, s, s.next);
    std::swap(s.words, s.next);
  }
}

}  // namespace vtllm::tok
