// GCC 12 reports a false -Wrestrict inside std::string's operator+ when inlined at -O3
// (GCC bug 105329); it must be silenced before <string> is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/unicode.h"

namespace vtllm::jinja {
namespace {

// Newlines normalized to "\n" as Jinja does (\r\n and \r), one trailing newline dropped unless
// keep_trailing_newline.
std::string NormalizeSource(std::string_view src, bool keep_trailing_newline) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length in bytes of the whitespace code point at s[i] (Python's \s), or 0.
size_t SpaceAt(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return (b == ' ' || (b >= 0x09 && b <= 0x0D) || (b >= 0x1C && b <= 0x1F)) ? 1 : 0;
  size_t n = (b >= 0xF0) ? 4 : (b >= 0xE0) ? 3 : (b >= 0xC0) ? 2 : 1;
  if (i + n > s.size()) return 0;
  std::u32string cps = unicode::Decode(s.substr(i, n));
  return (cps.size() == 1 && unicode::IsSpace(cps[0])) ? n : 0;
}

std::string RStripSpace(std::string_view s) {
  // Walk forward so multi-byte whitespace is recognised; keep the prefix up to the last
  // non-space code point.
  size_t keep = 0;
  size_t i = 0;
  while (i < s.size()) {
    size_t n = SpaceAt(s, i);
    if (n) {
      i += n;
    } else {
      auto b = static_cast<unsigned char>(s[i]);
      size_t len = (b >= 0xF0) ? 4 : (b >= 0xE0) ? 3 : (b >= 0xC0) ? 2 : 1;
      i += len;
      keep = std::min(i, s.size());
    }
  }
  return std::string(s.substr(0, keep));
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& options)
      : src_(NormalizeSource(source, options.keep_trailing_newline)), opt_(options) {}

  std::vector<Token> Run() {
    while (pos_ < src_.size()) {
      size_t start = FindTagStart(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      int text_line = line_;
      if (start == src_.size()) {
        Emit(Token::Type::kText, std::move(text), text_line);
        Advance(src_.size());
        break;
      }
      char kind = src_[start + 1];  // '{', '%' or '#'
      char marker = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (marker == '-') {
        text = RStripSpace(text);
      } else if (kind != '{' && marker != '+' && opt_.lstrip_blocks) {
        size_t l_pos = text.rfind('\n');
        l_pos = (l_pos == std::string::npos) ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting_) {
          bool blank = true;
          for (size_t i = l_pos; i < text.size(); ++i) {
            if (text[i] != ' ' && text[i] != '\t' && text[i] != '\v' && text[i] != '\f') blank = false;
          }
          if (blank) text.resize(l_pos);
        }
      }
      Emit(Token::Type::kText, std::move(text), text_line);
      Advance(start);
      size_t after_marker = start + 2 + ((marker == '-' || (marker == '+' && kind != '{')) ? 1 : 0);
      if (kind == '#') {
        LexComment(after_marker);
      } else if (kind == '%' && IsRawBegin(after_marker)) {
        LexRaw(after_marker);
      } else {
        LexTag(kind, after_marker);
      }
    }
    out_.push_back({Token::Type::kEof, "", line_});
    return std::move(out_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  // Moves the cursor to `to`, counting lines.
  void Advance(size_t to) {
    for (size_t i = pos_; i < to; ++i) {
      if (src_[i] == '\n') ++line_;
    }
    pos_ = to;
  }

  void Emit(Token::Type type, std::string value, int line) {
    if (type == Token::Type::kText && value.empty()) return;
    out_.push_back({type, std::move(value), line});
  }

  // After a tag end at `end` (one past the closing delimiter) with the given strip marker:
  // '-' strips all following whitespace; trim_blocks drops one newline after block tags.
  void FinishTagEnd(size_t end, char marker, bool is_block) {
    size_t p = end;
    if (marker == '-') {
      while (p < src_.size()) {
        size_t n = SpaceAt(src_, p);
        if (!n) break;
        p += n;
      }
    } else if (marker != '+' && is_block && opt_.trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_starting_ = p > end && src_[p - 1] == '\n';
    Advance(p);
  }

  void LexComment(size_t from) {
    size_t close = src_.find("#}", from);
    if (close == std::string::npos) throw TemplateSyntaxError(line_, "unclosed comment '{#'");
    char marker = (close > from && (src_[close - 1] == '-' || src_[close - 1] == '+')) ? src_[close - 1] : '\0';
    FinishTagEnd(close + 2, marker, /*is_block=*/true);
  }

  size_t SkipSpaces(size_t p) const {
    while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n')) ++p;
    return p;
  }

  // `{% raw %}` (or with markers), `from` just after "{%" and its marker.
  bool IsRawBegin(size_t from) const {
    size_t p = SkipSpaces(from);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = SkipSpaces(p + 3);
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    return src_.compare(p, 2, "%}") == 0;
  }

  void LexRaw(size_t from) {
    size_t p = SkipSpaces(from) + 3;
    p = SkipSpaces(p);
    char marker = '\0';
    if (src_[p] == '-' || src_[p] == '+') marker = src_[p++];
    FinishTagEnd(p + 2, marker, true);
    // Find {%[-+]? endraw [-+]?%}
    size_t search = pos_;
    while (true) {
      size_t open = src_.find("{%", search);
      if (open == std::string::npos) throw TemplateSyntaxError(line_, "missing '{% endraw %}'");
      size_t q = open + 2;
      char open_marker = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) open_marker = src_[q++];
      q = SkipSpaces(q);
      if (src_.compare(q, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      q = SkipSpaces(q + 6);
      char close_marker = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) close_marker = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) {
        search = open + 2;
        continue;
      }
      std::string body = src_.substr(pos_, open - pos_);
      if (open_marker == '-') {
        body = RStripSpace(body);
      } else if (open_marker != '+' && opt_.lstrip_blocks) {
        size_t l_pos = body.rfind('\n');
        if (l_pos != std::string::npos && body.find_first_not_of(" \t", l_pos + 1) == std::string::npos) {
          body.resize(l_pos + 1);
        }
      }
      Emit(Token::Type::kText, std::move(body), line_);
      Advance(open);
      FinishTagEnd(q + 2, close_marker, true);
      return;
    }
  }

  void LexTag(char kind, size_t from) {
    bool is_block = kind == '%';
    out_.push_back({is_block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", line_});
    Advance(from);
    int balance = 0;
    while (true) {
      while (pos_ < src_.size() && (src_[pos_] == ' ' || src_[pos_] == '\t' || src_[pos_] == '\n' ||
                                    src_[pos_] == '\r' || src_[pos_] == '\f' || src_[pos_] == '\v')) {
        Advance(pos_ + 1);
      }
      if (pos_ >= src_.size()) {
        throw TemplateSyntaxError(line_, is_block ? "unexpected end of template, expected '%}'"
                                                  : "unexpected end of template, expected '}}'");
      }
      if (balance == 0) {
        const char* close = is_block ? "%}" : "}}";
        char c = src_[pos_];
        if ((c == '-' || (c == '+' && is_block)) && src_.compare(pos_ + 1, 2, close) == 0) {
          out_.push_back({is_block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", line_});
          FinishTagEnd(pos_ + 3, c, is_block);
          return;
        }
        if (src_.compare(pos_, 2, close) == 0) {
          out_.push_back({is_block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", line_});
          FinishTagEnd(pos_ + 2, '\0', is_block);
          return;
        }
      }
      LexExpressionToken(balance);
    }
  }

  void LexExpressionToken(int& balance) {
    char c = src_[pos_];
    int line = line_;
    auto uc = static_cast<unsigned char>(c);
    if (std::isalpha(uc) || c == '_') {
      size_t e = pos_;
      while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
      Emit(Token::Type::kName, src_.substr(pos_, e - pos_), line);
      Advance(e);
      return;
    }
    if (std::isdigit(uc)) {
      LexNumber();
      return;
    }
    if (c == '\'' || c == '"') {
      LexString(c);
      return;
    }
    static const char* kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        out_.push_back({Token::Type::kOperator, op, line});
        Advance(pos_ + 2);
        return;
      }
    }
    static const std::string_view kOne = "+-*/%~[](){}<>=.:|,";
    if (kOne.find(c) != std::string_view::npos) {
      if (c == '(' || c == '[' || c == '{') ++balance;
      if (c == ')' || c == ']' || c == '}') {
        if (balance == 0) throw TemplateSyntaxError(line, std::string("unexpected '") + c + "'");
        --balance;
      }
      out_.push_back({Token::Type::kOperator, std::string(1, c), line});
      Advance(pos_ + 1);
      return;
    }
    std::string shown = uc >= 0x20 && uc < 0x7F ? std::string(1, c) : "\\x" + std::to_string(uc);
    throw TemplateSyntaxError(line, "unexpected character '" + shown + "' inside a tag");
  }

  void LexNumber() {
    size_t p = pos_;
    bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
    auto digits = [&](size_t& q) {
      size_t s = q;
      while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) ||
                                 (src_[q] == '_' && q + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[q + 1])) && q > s))) {
        ++q;
      }
    };
    digits(p);
    bool is_float = false;
    if (!after_dot) {
      if (p + 1 < src_.size() && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
        ++p;
        digits(p);
        is_float = true;
      }
      if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
        size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
          digits(q);
          p = q;
          is_float = true;
        }
      }
    }
    std::string text;
    for (size_t i = pos_; i < p; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    Emit(is_float ? Token::Type::kFloat : Token::Type::kInteger, std::move(text), line_);
    Advance(p);
  }

  void LexString(char quote) {
    int line = line_;
    size_t p = pos_ + 1;
    std::string value;
    while (true) {
      if (p >= src_.size()) throw TemplateSyntaxError(line, "unterminated string literal");
      char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) throw TemplateSyntaxError(line, "unterminated string literal");
      char e = src_[p + 1];
      p += 2;
      auto hex = [&](int n) -> char32_t {
        if (p + static_cast<size_t>(n) > src_.size()) throw TemplateSyntaxError(line, "truncated escape in string literal");
        char32_t v = 0;
        for (int i = 0; i < n; ++i) {
          char h = src_[p + static_cast<size_t>(i)];
          if (!std::isxdigit(static_cast<unsigned char>(h))) throw TemplateSyntaxError(line, "truncated escape in string literal");
          v = v * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        p += static_cast<size_t>(n);
        return v;
      };
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'a': value.push_back('\a'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'n': value.push_back('\n'); break;
        case 'r': value.push_back('\r'); break;
        case 't': value.push_back('\t'); break;
        case 'v': value.push_back('\v'); break;
        case 'x': unicode::Append(value, hex(2)); break;
        case 'u': unicode::Append(value, hex(4)); break;
        case 'U': {
          char32_t v = hex(8);
          if (v > 0x10FFFF) throw TemplateSyntaxError(line, "invalid \\U escape in string literal");
          unicode::Append(value, v);
          break;
        }
        case 'N': throw TemplateUnsupportedError(line, "\\N{...} escapes in string literals");
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i) {
              v = v * 8 + static_cast<char32_t>(src_[p++] - '0');
            }
            unicode::Append(value, v);
          } else {
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    out_.push_back({Token::Type::kString, std::move(value), line});
    Advance(p + 1);
  }

  std::string src_;
  LexerOptions opt_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> Tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(source, options).Run();
}

}  // namespace vtllm::jinja
