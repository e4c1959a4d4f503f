// Python methods of str, list and dict that templates call (message.content.startswith(...),
// tool.items(), ...). Strings are indexed by code point, as in Python.
// GCC 12 reports a false -Wrestrict inside std::string's operator+ when inlined at -O3
// (GCC bug 105329); it must be silenced before <string> is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <algorithm>
#include <cstring>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/unicode.h"

namespace vtllm::jinja {
namespace {

using MethodFn = Value (*)(Interpreter&, const Value& self, CallArgs& args, int line);

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string name, MethodFn fn) : Callable(std::move(name)), self_(std::move(self)), fn_(fn) {}
  Value Call(Interpreter& interp, CallArgs args, int line) override { return fn_(interp, self_, args, line); }

 private:
  Value self_;
  MethodFn fn_;
};

const std::string& Str(const Value& self) { return self.as_string(); }

std::string ArgStr(const Value* v, std::string_view what, int line) {
  if (!v || !v->is_string()) {
    throw TemplateRuntimeError(line, std::string(what) + ": expected a string argument, got " +
                                         (v ? "'" + v->TypeName() + "'" : std::string("nothing")));
  }
  return v->as_string();
}

// Optional character set argument of strip/lstrip/rstrip; nullopt means whitespace.
std::optional<std::u32string> StripChars(const Value* v, std::string_view what, int line) {
  if (!v || v->is_none()) return std::nullopt;
  return unicode::Decode(ArgStr(v, what, line));
}

std::string StripImpl(const std::string& s, const std::optional<std::u32string>& chars, bool left, bool right) {
  std::u32string cps = unicode::Decode(s);
  auto strip = [&](char32_t c) {
    return chars ? chars->find(c) != std::u32string::npos : unicode::IsSpace(c);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cps[e - 1])) --e;
  }
  return unicode::Encode(std::u32string_view(cps).substr(b, e - b));
}

Value MStrip(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.strip()", {"chars"}, line);
  return Value(StripImpl(Str(self), StripChars(a.Get(0), "str.strip()", line), true, true));
}
Value MLStrip(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.lstrip()", {"chars"}, line);
  return Value(StripImpl(Str(self), StripChars(a.Get(0), "str.lstrip()", line), true, false));
}
Value MRStrip(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.rstrip()", {"chars"}, line);
  return Value(StripImpl(Str(self), StripChars(a.Get(0), "str.rstrip()", line), false, true));
}

// Code-point window [start, end) of s as Python's startswith/find take it.
std::string Window(const std::string& s, const Value* start, const Value* end, int line) {
  if ((!start || start->is_none()) && (!end || end->is_none())) return s;
  std::u32string cps = unicode::Decode(s);
  auto n = static_cast<int64_t>(cps.size());
  auto norm = [&](const Value* v, int64_t dflt) {
    if (!v || v->is_none()) return dflt;
    int64_t x = ToIndexInt(*v, "str method", line);
    if (x < 0) x = std::max<int64_t>(0, x + n);
    return std::min(x, n);
  };
  int64_t b = norm(start, 0), e = norm(end, n);
  if (e < b) return std::string();
  return unicode::Encode(std::u32string_view(cps).substr(static_cast<size_t>(b), static_cast<size_t>(e - b)));
}

bool AffixMatch(const std::string& s, const Value* affix, bool prefix, std::string_view what, int line) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix && affix->is_list() && affix->as_list()->is_tuple) {
    for (const auto& x : affix->as_list()->items) {
      if (one(ArgStr(&x, what, line))) return true;
    }
    return false;
  }
  return one(ArgStr(affix, what, line));
}

Value MStartsWith(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.startswith()", {"prefix", "start", "end"}, line);
  return Value(AffixMatch(Window(Str(self), a.Get(1), a.Get(2), line), a.Get(0), true, "str.startswith()", line));
}
Value MEndsWith(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.endswith()", {"suffix", "start", "end"}, line);
  return Value(AffixMatch(Window(Str(self), a.Get(1), a.Get(2), line), a.Get(0), false, "str.endswith()", line));
}

std::vector<Value> SplitWhitespace(const std::string& s, int64_t maxsplit, bool from_right) {
  std::u32string cps = unicode::Decode(s);
  std::vector<std::u32string> parts;
  if (!from_right) {
    size_t i = 0, n = cps.size();
    while (true) {
      while (i < n && unicode::IsSpace(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(cps.substr(i));  // the remainder keeps its trailing whitespace
        break;
      }
      size_t j = i;
      while (j < n && !unicode::IsSpace(cps[j])) ++j;
      parts.push_back(cps.substr(i, j - i));
      i = j;
    }
  } else {
    int64_t i = static_cast<int64_t>(cps.size()) - 1;
    while (true) {
      while (i >= 0 && unicode::IsSpace(cps[static_cast<size_t>(i)])) --i;
      if (i < 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(cps.substr(0, static_cast<size_t>(i) + 1));  // keeps its leading whitespace
        break;
      }
      int64_t j = i;
      while (j >= 0 && !unicode::IsSpace(cps[static_cast<size_t>(j)])) --j;
      parts.push_back(cps.substr(static_cast<size_t>(j + 1), static_cast<size_t>(i - j)));
      i = j;
    }
    std::reverse(parts.begin(), parts.end());
  }
  std::vector<Value> out;
  for (auto& p : parts) out.emplace_back(unicode::Encode(p));
  return out;
}

std::vector<Value> SplitSep(const std::string& s, const std::string& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (!from_right) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      size_t f = s.find(sep, pos);
      if (f == std::string::npos) break;
      parts.push_back(s.substr(pos, f - pos));
      pos = f + sep.size();
    }
    parts.push_back(s.substr(pos));
  } else {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep.size()) break;
      size_t f = s.rfind(sep, end - sep.size());
      if (f == std::string::npos) break;
      parts.push_back(s.substr(f + sep.size(), end - f - sep.size()));
      end = f;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  std::vector<Value> out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

Value SplitImpl(const Value& self, CallArgs& args, int line, bool from_right) {
  const char* what = from_right ? "str.rsplit()" : "str.split()";
  ArgReader a(args, what, {"sep", "maxsplit"}, line);
  int64_t maxsplit = a.Get(1) ? ToIndexInt(*a.Get(1), what, line) : -1;
  if (!a.Get(0) || a.Get(0)->is_none()) return Value::List(SplitWhitespace(Str(self), maxsplit, from_right));
  std::string sep = ArgStr(a.Get(0), what, line);
  if (sep.empty()) throw TemplateRuntimeError(line, "empty separator");
  return Value::List(SplitSep(Str(self), sep, maxsplit, from_right));
}
Value MSplit(Interpreter&, const Value& self, CallArgs& args, int line) { return SplitImpl(self, args, line, false); }
Value MRSplit(Interpreter&, const Value& self, CallArgs& args, int line) { return SplitImpl(self, args, line, true); }

Value MSplitLines(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.splitlines()", {"keepends"}, line);
  bool keep = a.Get(0) && a.Get(0)->Truthy();
  std::u32string cps = unicode::Decode(Str(self));
  std::vector<Value> out;
  size_t i = 0, start = 0;
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
  };
  while (i < cps.size()) {
    if (is_break(cps[i])) {
      size_t eol = i;
      if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
      ++i;
      out.emplace_back(unicode::Encode(std::u32string_view(cps).substr(start, (keep ? i : eol) - start)));
      start = i;
    } else {
      ++i;
    }
  }
  if (start < cps.size()) out.emplace_back(unicode::Encode(std::u32string_view(cps).substr(start)));
  return Value::List(std::move(out));
}

Value MUpper(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.upper()", {}, line);
  return Value(unicode::Upper(Str(self)));
}
Value MLower(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.lower()", {}, line);
  return Value(unicode::Lower(Str(self)));
}

bool IsCased(char32_t c) { return unicode::IsUpper(c) || unicode::IsLower(c); }

std::string PyTitle(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : unicode::Decode(s)) {
    if (IsCased(c)) {
      unicode::Append(out, prev_cased ? unicode::ToLower(c) : unicode::ToUpper(c));
      prev_cased = true;
    } else {
      unicode::Append(out, c);
      prev_cased = false;
    }
  }
  return out;
}

Value MCaseFold(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.casefold()", {}, line);
  std::string out;
  for (char32_t c : unicode::Decode(Str(self))) {
    if (c == 0xDF) {
      out += "ss";
    } else {
      unicode::Append(out, unicode::ToLower(c));
    }
  }
  return Value(std::move(out));
}

Value MTitle(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.title()", {}, line);
  return Value(PyTitle(Str(self)));
}

Value MCapitalize(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.capitalize()", {}, line);
  std::u32string cps = unicode::Decode(Str(self));
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) unicode::Append(out, i == 0 ? unicode::ToUpper(cps[i]) : unicode::ToLower(cps[i]));
  return Value(std::move(out));
}

std::string ReplaceImpl(const std::string& s, const std::string& old, const std::string& with, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string cps = unicode::Decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      if (i < cps.size()) unicode::Append(out, cps[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += with;
    pos = f + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

Value MReplace(Interpreter& interp, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.replace()", {"old", "new", "count"}, line);
  std::string old = ArgStr(a.Get(0), "str.replace()", line);
  std::string with = ArgStr(a.Get(1), "str.replace()", line);
  int64_t count = a.Get(2) ? ToIndexInt(*a.Get(2), "str.replace()", line) : -1;
  std::string out = ReplaceImpl(Str(self), old, with, count);
  interp.CheckSize(out.size(), line);
  return Value(std::move(out));
}

// find/rfind/index/rindex: code-point index of sub in s[start:end], or -1.
int64_t FindImpl(const Value& self, CallArgs& args, int line, bool from_right, const char* what) {
  ArgReader a(args, what, {"sub", "start", "end"}, line);
  std::string sub = ArgStr(a.Get(0), what, line);
  const std::string& s = Str(self);
  std::u32string cps = unicode::Decode(s);
  auto n = static_cast<int64_t>(cps.size());
  auto norm = [&](const Value* v, int64_t dflt) {
    if (!v || v->is_none()) return dflt;
    int64_t x = ToIndexInt(*v, what, line);
    if (x < 0) x = std::max<int64_t>(0, x + n);
    return std::min(x, n);
  };
  int64_t b = norm(a.Get(1), 0), e = norm(a.Get(2), n);
  if (e < b) return -1;
  std::string window = unicode::Encode(std::u32string_view(cps).substr(static_cast<size_t>(b), static_cast<size_t>(e - b)));
  size_t f = from_right ? window.rfind(sub) : window.find(sub);
  if (f == std::string::npos) return -1;
  return b + static_cast<int64_t>(unicode::Length(std::string_view(window).substr(0, f)));
}

Value MFind(Interpreter&, const Value& self, CallArgs& args, int line) { return Value(FindImpl(self, args, line, false, "str.find()")); }
Value MRFind(Interpreter&, const Value& self, CallArgs& args, int line) { return Value(FindImpl(self, args, line, true, "str.rfind()")); }
Value MIndex(Interpreter&, const Value& self, CallArgs& args, int line) {
  int64_t r = FindImpl(self, args, line, false, "str.index()");
  if (r < 0) throw TemplateRuntimeError(line, "substring not found");
  return Value(r);
}
Value MRIndex(Interpreter&, const Value& self, CallArgs& args, int line) {
  int64_t r = FindImpl(self, args, line, true, "str.rindex()");
  if (r < 0) throw TemplateRuntimeError(line, "substring not found");
  return Value(r);
}

Value MCount(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.count()", {"sub"}, line);
  std::string sub = ArgStr(a.Get(0), "str.count()", line);
  const std::string& s = Str(self);
  if (sub.empty()) return Value(static_cast<int64_t>(unicode::Length(s) + 1));
  int64_t c = 0;
  for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++c;
  return Value(c);
}

Value MJoin(Interpreter& interp, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.join()", {"iterable"}, line);
  if (!a.Get(0)) throw TemplateRuntimeError(line, "str.join() takes exactly one argument");
  std::string out;
  bool first = true;
  for (const auto& item : interp.Iterate(*a.Get(0), line)) {
    if (!item.is_string()) throw TemplateRuntimeError(line, "sequence item: expected str instance, " + item.TypeName() + " found");
    if (!first) out += Str(self);
    first = false;
    out += item.as_string();
    interp.CheckSize(out.size(), line);
  }
  return Value(std::move(out));
}

Value MFormat(Interpreter&, const Value& self, CallArgs& args, int line) { return Value(StrFormat(Str(self), args, line)); }

template <bool (*Pred)(char32_t)>
Value AllChars(const Value& self) {
  std::u32string cps = unicode::Decode(Str(self));
  if (cps.empty()) return Value(false);
  for (char32_t c : cps) {
    if (!Pred(c)) return Value(false);
  }
  return Value(true);
}
bool IsAlnum(char32_t c) { return unicode::IsAlpha(c) || unicode::IsDigit(c); }
Value MIsDigit(Interpreter&, const Value& self, CallArgs&, int) { return AllChars<unicode::IsDigit>(self); }
Value MIsAlpha(Interpreter&, const Value& self, CallArgs&, int) { return AllChars<unicode::IsAlpha>(self); }
Value MIsAlnum(Interpreter&, const Value& self, CallArgs&, int) { return AllChars<IsAlnum>(self); }
Value MIsSpace(Interpreter&, const Value& self, CallArgs&, int) { return AllChars<unicode::IsSpace>(self); }
Value MIsAscii(Interpreter&, const Value& self, CallArgs&, int) {
  return Value(unicode::IsAscii(Str(self)));
}

// Python islower/isupper: at least one cased character and none of the other case.
Value CaseCheck(const Value& self, bool lower) {
  bool any = false;
  for (char32_t c : unicode::Decode(Str(self))) {
    if (unicode::IsUpper(c)) {
      if (lower) return Value(false);
      any = true;
    } else if (unicode::IsLower(c)) {
      if (!lower) return Value(false);
      any = true;
    }
  }
  return Value(any);
}
Value MIsLower(Interpreter&, const Value& self, CallArgs&, int) { return CaseCheck(self, true); }
Value MIsUpper(Interpreter&, const Value& self, CallArgs&, int) { return CaseCheck(self, false); }

std::string Pad(const std::string& s, int64_t width, char32_t fill, char align) {
  auto len = static_cast<int64_t>(unicode::Length(s));
  if (width <= len) return s;
  int64_t total = width - len;
  int64_t left = align == '<' ? 0 : align == '>' ? total : total / 2;
  // str.center() ('c') puts the odd fill character on the left when the width is odd;
  // format's '^' always puts it on the right.
  if (align == 'c' && (total & width & 1)) left = total / 2 + 1;
  std::string l, r;
  for (int64_t i = 0; i < left; ++i) unicode::Append(l, fill);
  for (int64_t i = 0; i < total - left; ++i) unicode::Append(r, fill);
  return l + s + r;
}

Value PadMethod(const Value& self, CallArgs& args, int line, char align, const char* what) {
  ArgReader a(args, what, {"width", "fillchar"}, line);
  if (!a.Get(0)) throw TemplateRuntimeError(line, std::string(what) + " needs a width");
  int64_t width = ToIndexInt(*a.Get(0), what, line);
  if (width > (int64_t{1} << 24)) throw TemplateRuntimeError(line, std::string(what) + ": width too large");
  char32_t fill = ' ';
  if (a.Get(1)) {
    std::u32string f = unicode::Decode(ArgStr(a.Get(1), what, line));
    if (f.size() != 1) throw TemplateRuntimeError(line, "The fill character must be exactly one character long");
    fill = f[0];
  }
  return Value(Pad(Str(self), width, fill, align));
}
Value MCenter(Interpreter&, const Value& self, CallArgs& args, int line) { return PadMethod(self, args, line, 'c', "str.center()"); }
Value MLJust(Interpreter&, const Value& self, CallArgs& args, int line) { return PadMethod(self, args, line, '<', "str.ljust()"); }
Value MRJust(Interpreter&, const Value& self, CallArgs& args, int line) { return PadMethod(self, args, line, '>', "str.rjust()"); }

Value MZFill(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.zfill()", {"width"}, line);
  if (!a.Get(0)) throw TemplateRuntimeError(line, "str.zfill() needs a width");
  int64_t width = std::min<int64_t>(ToIndexInt(*a.Get(0), "str.zfill()", line), int64_t{1} << 24);
  std::string s = Str(self);
  auto len = static_cast<int64_t>(unicode::Length(s));
  if (width <= len) return Value(s);
  std::string sign;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    sign = s.substr(0, 1);
    s = s.substr(1);
  }
  return Value(sign + std::string(static_cast<size_t>(width - len), '0') + s);
}

Value MRemovePrefix(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.removeprefix()", {"prefix"}, line);
  std::string p = ArgStr(a.Get(0), "str.removeprefix()", line);
  const std::string& s = Str(self);
  return Value(s.compare(0, p.size(), p) == 0 && p.size() <= s.size() ? s.substr(p.size()) : s);
}
Value MRemoveSuffix(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "str.removesuffix()", {"suffix"}, line);
  std::string p = ArgStr(a.Get(0), "str.removesuffix()", line);
  const std::string& s = Str(self);
  if (!p.empty() && p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0) {
    return Value(s.substr(0, s.size() - p.size()));
  }
  return Value(s);
}

Value PartitionImpl(const Value& self, CallArgs& args, int line, bool from_right) {
  const char* what = from_right ? "str.rpartition()" : "str.partition()";
  ArgReader a(args, what, {"sep"}, line);
  std::string sep = ArgStr(a.Get(0), what, line);
  if (sep.empty()) throw TemplateRuntimeError(line, "empty separator");
  const std::string& s = Str(self);
  size_t f = from_right ? s.rfind(sep) : s.find(sep);
  if (f == std::string::npos) {
    return from_right ? Value::Tuple({Value(""), Value(""), Value(s)}) : Value::Tuple({Value(s), Value(""), Value("")});
  }
  return Value::Tuple({Value(s.substr(0, f)), Value(sep), Value(s.substr(f + sep.size()))});
}
Value MPartition(Interpreter&, const Value& self, CallArgs& args, int line) { return PartitionImpl(self, args, line, false); }
Value MRPartition(Interpreter&, const Value& self, CallArgs& args, int line) { return PartitionImpl(self, args, line, true); }

// --- dict -----------------------------------------------------------------------------------
Value DItems(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "dict.items()", {}, line);
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict()->entries) out.push_back(Value::Tuple({k, v}));
  return Value::List(std::move(out));
}
Value DKeys(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "dict.keys()", {}, line);
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict()->entries) out.push_back(k);
  return Value::List(std::move(out));
}
Value DValues(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "dict.values()", {}, line);
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict()->entries) out.push_back(v);
  return Value::List(std::move(out));
}
Value DGet(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "dict.get()", {"key", "default"}, line);
  if (!a.Get(0)) throw TemplateRuntimeError(line, "dict.get() needs a key");
  if (const Value* v = self.as_dict()->Find(*a.Get(0))) return *v;
  return a.GetOr(1, Value::None());
}

// --- list -----------------------------------------------------------------------------------
Value LIndex(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "list.index()", {"value"}, line);
  if (!a.Get(0)) throw TemplateRuntimeError(line, "list.index() needs a value");
  const auto& items = self.as_list()->items;
  for (size_t i = 0; i < items.size(); ++i) {
    if (Equal(items[i], *a.Get(0))) return Value(static_cast<int64_t>(i));
  }
  throw TemplateRuntimeError(line, a.Get(0)->Repr() + " is not in list");
}
Value LCount(Interpreter&, const Value& self, CallArgs& args, int line) {
  ArgReader a(args, "list.count()", {"value"}, line);
  if (!a.Get(0)) throw TemplateRuntimeError(line, "list.count() needs a value");
  int64_t c = 0;
  for (const auto& x : self.as_list()->items) c += Equal(x, *a.Get(0)) ? 1 : 0;
  return Value(c);
}

Value Unsafe(Interpreter&, const Value& self, CallArgs&, int line) {
  // transformers renders in Jinja's ImmutableSandboxedEnvironment, which refuses these.
  throw TemplateRuntimeError(line, "a mutating method of a '" + self.TypeName() +
                                       "' object was called; the sandbox transformers uses forbids it");
}

struct MethodEntry {
  const char* name;
  MethodFn fn;
};

constexpr MethodEntry kStrMethods[] = {
    {"startswith", MStartsWith}, {"endswith", MEndsWith}, {"strip", MStrip}, {"lstrip", MLStrip},
    {"rstrip", MRStrip}, {"split", MSplit}, {"rsplit", MRSplit}, {"splitlines", MSplitLines},
    {"upper", MUpper}, {"lower", MLower}, {"casefold", MCaseFold}, {"title", MTitle}, {"capitalize", MCapitalize},
    {"replace", MReplace}, {"find", MFind}, {"rfind", MRFind}, {"index", MIndex}, {"rindex", MRIndex},
    {"count", MCount}, {"join", MJoin}, {"format", MFormat}, {"isdigit", MIsDigit}, {"isdecimal", MIsDigit},
    {"isalpha", MIsAlpha}, {"isalnum", MIsAlnum}, {"isspace", MIsSpace}, {"islower", MIsLower},
    {"isupper", MIsUpper}, {"isascii", MIsAscii}, {"center", MCenter}, {"ljust", MLJust}, {"rjust", MRJust},
    {"zfill", MZFill}, {"removeprefix", MRemovePrefix}, {"removesuffix", MRemoveSuffix},
    {"partition", MPartition}, {"rpartition", MRPartition},
};
constexpr const char* kStrUnsupported[] = {"encode", "expandtabs", "format_map", "isidentifier",
                                           "isnumeric", "isprintable", "istitle", "maketrans", "swapcase",
                                           "translate"};
constexpr MethodEntry kDictMethods[] = {
    {"items", DItems}, {"keys", DKeys}, {"values", DValues}, {"get", DGet},
    {"pop", Unsafe}, {"popitem", Unsafe}, {"setdefault", Unsafe}, {"update", Unsafe}, {"clear", Unsafe},
};
constexpr const char* kDictUnsupported[] = {"copy", "fromkeys"};
constexpr MethodEntry kListMethods[] = {
    {"index", LIndex}, {"count", LCount}, {"append", Unsafe}, {"extend", Unsafe}, {"insert", Unsafe},
    {"pop", Unsafe}, {"remove", Unsafe}, {"reverse", Unsafe}, {"sort", Unsafe}, {"clear", Unsafe},
};
constexpr const char* kListUnsupported[] = {"copy"};

template <size_t N, size_t M>
bool Lookup(const Value& obj, const std::string& name, int line, const MethodEntry (&table)[N],
            const char* const (&unsupported)[M], Value* out) {
  for (const auto& m : table) {
    if (name == m.name) {
      *out = Value(CallablePtr(std::make_shared<BoundMethod>(obj, obj.TypeName() + "." + name, m.fn)));
      return true;
    }
  }
  for (const char* u : unsupported) {
    if (name == u) throw TemplateUnsupportedError(line, "the " + obj.TypeName() + "." + name + "() method");
  }
  return false;
}

}  // namespace

bool LookupMethod(const Value& obj, const std::string& name, int line, Value* out) {
  if (obj.is_string()) return Lookup(obj, name, line, kStrMethods, kStrUnsupported, out);
  if (obj.is_dict()) return Lookup(obj, name, line, kDictMethods, kDictUnsupported, out);
  if (obj.is_list()) {
    if (obj.as_list()->is_tuple) {
      if (name == "index") return Lookup(obj, name, line, kListMethods, kListUnsupported, out);
      if (name == "count") return Lookup(obj, name, line, kListMethods, kListUnsupported, out);
      return false;
    }
    return Lookup(obj, name, line, kListMethods, kListUnsupported, out);
  }
  return false;
}

}  // namespace vtllm::jinja
