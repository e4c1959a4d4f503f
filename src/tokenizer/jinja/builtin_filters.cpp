// Jinja's built-in filters, with transformers' tojson (json.dumps with ensure_ascii=False and
// its indent/separators/sort_keys arguments) in place of Jinja's HTML-safe one.
// GCC 12 reports a false -Wrestrict inside std::string's operator+ when inlined at -O3
// (GCC bug 105329); it must be silenced before <string> is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/unicode.h"

namespace vtllm::jinja {
namespace {

size_t Len(const Value& v, int line) {
  switch (v.type()) {
    case Value::Type::kUndefined: return 0;
    case Value::Type::kString: return unicode::Length(v.as_string());
    case Value::Type::kList: return v.as_list()->items.size();
    case Value::Type::kDict: return v.as_dict()->size();
    default: throw TemplateRuntimeError(line, "object of type '" + v.TypeName() + "' has no len()");
  }
}

std::string StrArg(const Value* v, const char* what, int line) {
  if (!v) throw TemplateRuntimeError(line, std::string(what) + ": missing argument");
  if (!v->is_string()) throw TemplateRuntimeError(line, std::string(what) + ": expected a string, got '" + v->TypeName() + "'");
  return v->as_string();
}

// Jinja's make_attrgetter: "a.b.0" looked up item-first at each step.
Value GetPath(Interpreter& interp, const Value& item, const Value& attribute, const Value* dflt, int line) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    const std::string& s = attribute.as_string();
    size_t start = 0;
    while (true) {
      size_t dot = s.find('.', start);
      std::string part = s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (digits && part.size() < 18) {
        parts.emplace_back(static_cast<int64_t>(std::stoll(part)));
      } else {
        parts.emplace_back(part);
      }
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  } else {
    parts.push_back(attribute);
  }
  Value cur = item;
  for (const auto& p : parts) {
    cur = interp.GetItem(cur, p, line);
    if (dflt && cur.is_undefined()) cur = *dflt;
  }
  return cur;
}

Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(unicode::Lower(v.as_string()));
  return v;
}

void StableSort(std::vector<std::pair<Value, Value>>& keyed, bool reverse, int line) {
  bool ok = true;
  std::string bad;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    auto lt = reverse ? Less(b.first, a.first) : Less(a.first, b.first);
    if (!lt) {
      ok = false;
      bad = a.first.TypeName() + "' and '" + b.first.TypeName();
      return false;
    }
    return *lt;
  });
  if (!ok) throw TemplateRuntimeError(line, "'<' not supported between instances of '" + bad + "'");
}

Value FLength(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "length", {}, line);
  return Value(static_cast<int64_t>(Len(v, line)));
}

Value FDefault(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "default", {"default_value", "boolean"}, line);
  bool boolean = a.Get(1) && a.Get(1)->Truthy();
  if (v.is_undefined() || (boolean && !v.Truthy())) return a.GetOr(0, Value(""));
  return v;
}

Value FFirst(Interpreter& interp, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "first", {}, line);
  auto items = interp.Iterate(v, line);
  if (items.empty()) return Value::MakeUndefined("No first item, sequence was empty.");
  return items.front();
}

Value FLast(Interpreter& interp, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "last", {}, line);
  if (!v.is_list() && !v.is_string()) throw TemplateRuntimeError(line, "'" + v.TypeName() + "' object is not reversible");
  auto items = interp.Iterate(v, line);
  if (items.empty()) return Value::MakeUndefined("No last item, sequence was empty.");
  return items.back();
}

Value FJoin(Interpreter& interp, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "join", {"d", "attribute"}, line);
  std::string sep = a.Get(0) ? a.Get(0)->Str() : std::string();
  std::string out;
  bool first = true;
  for (const auto& item : interp.Iterate(v, line)) {
    if (!first) out += sep;
    first = false;
    out += (a.Get(1) ? GetPath(interp, item, *a.Get(1), nullptr, line) : item).Str();
    interp.CheckSize(out.size(), line);
  }
  return Value(std::move(out));
}

Value FList(Interpreter& interp, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "list", {}, line);
  return Value::List(interp.Iterate(v, line));
}

Value FItems(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "items", {}, line);
  if (v.is_undefined()) return Value::List({});
  if (!v.is_dict()) throw TemplateRuntimeError(line, "Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict()->entries) out.push_back(Value::Tuple({k, val}));
  return Value::List(std::move(out));
}

Value FString(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "string", {}, line);
  return Value(v.Str());
}

Value FSafe(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "safe", {}, line);
  return v;
}

// The text of a number literal as Python's int()/float() see it: Unicode whitespace
// around it stripped; nullopt when it is blank or holds a non-ASCII character (or '_' when
// !underscores). Whitespace inside stays (as ' ') for the caller to reject.
std::optional<std::string> NumberText(const std::string& s, bool underscores) {
  std::string t;
  for (char32_t c : unicode::Decode(s)) {
    if (unicode::IsSpace(c)) {
      t.push_back(' ');
    } else if (c < 0x80 && (underscores || c != '_')) {
      t.push_back(static_cast<char>(c));
    } else {
      return std::nullopt;
    }
  }
  size_t b = t.find_first_not_of(' '), e = t.find_last_not_of(' ');
  if (b == std::string::npos) return std::nullopt;
  return t.substr(b, e - b + 1);
}

// Python int(str, base) for base 10; nullopt when it is not an integer literal.
std::optional<int64_t> ParseInt(const std::string& s, int64_t base) {
  const std::optional<std::string> text = NumberText(s, true);
  if (!text) return std::nullopt;
  const std::string& t = *text;
  std::string digits;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '_') {
      if (i == 0 || i + 1 == t.size() || t[i + 1] == '_' || !std::isalnum(static_cast<unsigned char>(t[i - 1]))) return std::nullopt;
      continue;
    }
    digits.push_back(t[i]);
  }
  if (digits.empty()) return std::nullopt;
  size_t start = (digits[0] == '+' || digits[0] == '-') ? 1 : 0;
  if (start == digits.size()) return std::nullopt;
  for (size_t i = start; i < digits.size(); ++i) {
    char c = static_cast<char>(std::tolower(static_cast<unsigned char>(digits[i])));
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
  }
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
  if (errno || *end) return std::nullopt;
  return v;
}

// Python float(str); nullopt when it is not a float literal.
std::optional<double> ParseFloat(const std::string& s) {
  const std::optional<std::string> text = NumberText(s, false);
  if (!text) return std::nullopt;
  const std::string& t = *text;
  std::string lower;
  for (char c : t) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  std::string body = (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  double sign = lower[0] == '-' ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") return sign * INFINITY;
  if (body == "nan") return NAN;
  if (body.empty() || body.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (*end) return std::nullopt;
  return v;
}

Value FInt(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "int", {"default", "base"}, line);
  Value dflt = a.GetOr(0, Value(int64_t{0}));
  int64_t base = a.Get(1) ? ToIndexInt(*a.Get(1), "int", line) : 10;
  if (base < 2 || base > 36) throw TemplateUnsupportedError(line, "int(base=" + std::to_string(base) + ")");
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
  if (v.is_float()) {
    double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (auto i = ParseInt(v.as_string(), base)) return Value(*i);
    if (auto d = ParseFloat(v.as_string())) {
      if (std::isfinite(*d) && std::fabs(*d) < 9.2e18) return Value(static_cast<int64_t>(*d));
    }
  }
  return dflt;
}

Value FFloat(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "float", {"default"}, line);
  Value dflt = a.GetOr(0, Value(0.0));
  if (v.is_number()) return Value(v.ToDouble());
  if (v.is_string()) {
    if (auto d = ParseFloat(v.as_string())) return Value(*d);
  }
  return dflt;
}

std::string StripStr(const std::string& s, const Value* chars) {
  std::u32string cps = unicode::Decode(s);
  std::optional<std::u32string> set;
  if (chars && !chars->is_none()) set = unicode::Decode(chars->Str());
  auto strip = [&](char32_t c) { return set ? set->find(c) != std::u32string::npos : unicode::IsSpace(c); };
  size_t b = 0, e = cps.size();
  while (b < e && strip(cps[b])) ++b;
  while (e > b && strip(cps[e - 1])) --e;
  return unicode::Encode(std::u32string_view(cps).substr(b, e - b));
}

Value FTrim(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "trim", {"chars"}, line);
  return Value(StripStr(v.Str(), a.Get(0)));
}

Value FUpper(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "upper", {}, line);
  return Value(unicode::Upper(v.Str()));
}

Value FLower(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "lower", {}, line);
  return Value(unicode::Lower(v.Str()));
}

Value FCapitalize(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "capitalize", {}, line);
  std::u32string cps = unicode::Decode(v.Str());
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) unicode::Append(out, i == 0 ? unicode::ToUpper(cps[i]) : unicode::ToLower(cps[i]));
  return Value(std::move(out));
}

Value FTitle(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "title", {}, line);
  std::string out;
  bool word_start = true;
  for (char32_t c : unicode::Decode(v.Str())) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || unicode::IsSpace(c);
    if (sep) {
      unicode::Append(out, c);
      word_start = true;
    } else {
      unicode::Append(out, word_start ? unicode::ToUpper(c) : unicode::ToLower(c));
      word_start = false;
    }
  }
  return Value(std::move(out));
}

Value FReplace(Interpreter& interp, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "replace", {"old", "new", "count"}, line);
  CallArgs m;
  m.positional.push_back(Value(StrArg(a.Get(0), "replace", line)));
  m.positional.push_back(Value(StrArg(a.Get(1), "replace", line)));
  if (a.Get(2) && !a.Get(2)->is_none()) m.positional.push_back(*a.Get(2));
  Value method;
  LookupMethod(Value(v.Str()), "replace", line, &method);
  return interp.CallValue(method, std::move(m), line);
}

Value FToJson(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}, line);
  JsonDumpOptions o;
  o.ensure_ascii = a.Get(0) && a.Get(0)->Truthy();
  if (const Value* ind = a.Get(1); ind && !ind->is_none()) {
    o.has_indent = true;
    if (ind->is_string()) {
      o.indent = ind->as_string();
    } else {
      int64_t n = ToIndexInt(*ind, "tojson(indent=...)", line);
      o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(n, 0, 64)), ' ');
    }
    o.item_separator = ",";
  }
  if (const Value* sep = a.Get(2); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->as_list()->items.size() != 2 || !sep->as_list()->items[0].is_string() ||
        !sep->as_list()->items[1].is_string()) {
      throw TemplateRuntimeError(line, "tojson(separators=...) must be a pair of strings");
    }
    o.item_separator = sep->as_list()->items[0].as_string();
    o.key_separator = sep->as_list()->items[1].as_string();
  }
  o.sort_keys = a.Get(3) && a.Get(3)->Truthy();
  return Value(PyJsonDumps(v, o, line));
}

// select/reject/selectattr/rejectattr share Jinja's prepare_select_or_reject.
Value SelectImpl(Interpreter& interp, const Value& v, CallArgs& args, int line, bool by_attr, bool keep_if) {
  std::vector<Value> rest = args.positional;
  if (!args.kwargs.empty()) throw TemplateRuntimeError(line, "select/reject filters take no keyword arguments");
  Value attr;
  if (by_attr) {
    if (rest.empty()) throw TemplateRuntimeError(line, "selectattr/rejectattr need an attribute name");
    attr = rest.front();
    rest.erase(rest.begin());
  }
  std::string test;
  if (!rest.empty()) {
    if (!rest.front().is_string()) throw TemplateRuntimeError(line, "the test name must be a string");
    test = rest.front().as_string();
    rest.erase(rest.begin());
  }
  std::vector<Value> out;
  for (const auto& item : interp.Iterate(v, line)) {
    Value probe = by_attr ? GetPath(interp, item, attr, nullptr, line) : item;
    bool r;
    if (test.empty()) {
      r = probe.Truthy();
    } else {
      CallArgs targs;
      targs.positional = rest;
      r = interp.ApplyTest(test, probe, std::move(targs), line);
    }
    if (r == keep_if) out.push_back(item);
  }
  return Value::List(std::move(out));
}

Value FSelect(Interpreter& i, const Value& v, CallArgs& a, int line) { return SelectImpl(i, v, a, line, false, true); }
Value FReject(Interpreter& i, const Value& v, CallArgs& a, int line) { return SelectImpl(i, v, a, line, false, false); }
Value FSelectAttr(Interpreter& i, const Value& v, CallArgs& a, int line) { return SelectImpl(i, v, a, line, true, true); }
Value FRejectAttr(Interpreter& i, const Value& v, CallArgs& a, int line) { return SelectImpl(i, v, a, line, true, false); }

Value FMap(Interpreter& interp, const Value& v, CallArgs& args, int line) {
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, val] : args.kwargs) {
    if (k == "attribute") attribute = &val;
    else if (k == "default") dflt = &val;
  }
  std::vector<Value> out;
  if (attribute) {
    if (!args.positional.empty() || args.kwargs.size() > (dflt ? 2u : 1u)) {
      throw TemplateRuntimeError(line, "map(attribute=...) takes no other arguments than default");
    }
    for (const auto& item : interp.Iterate(v, line)) out.push_back(GetPath(interp, item, *attribute, dflt, line));
    return Value::List(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    throw TemplateRuntimeError(line, "map needs a filter name or attribute=");
  }
  std::string name = args.positional[0].as_string();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.kwargs = args.kwargs;
  for (const auto& item : interp.Iterate(v, line)) out.push_back(interp.ApplyFilter(name, item, rest, line));
  return Value::List(std::move(out));
}

Value FAbs(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "abs", {}, line);
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    int64_t x = v.is_bool() ? v.as_bool() : v.as_int();
    if (x == INT64_MIN) throw TemplateRuntimeError(line, "integer overflow");
    return Value(x < 0 ? -x : x);
  }
  throw TemplateRuntimeError(line, "bad operand type for abs(): '" + v.TypeName() + "'");
}

Value FRound(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "round", {"precision", "method"}, line);
  int64_t precision = a.Get(0) ? ToIndexInt(*a.Get(0), "round", line) : 0;
  std::string method = a.Get(1) ? StrArg(a.Get(1), "round", line) : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    throw TemplateRuntimeError(line, "method must be common, ceil or floor");
  }
  if (!v.is_number()) throw TemplateRuntimeError(line, "round: expected a number, got '" + v.TypeName() + "'");
  if (precision < -300 || precision > 300) throw TemplateUnsupportedError(line, "round() precision beyond ±300");
  if (method == "common") {
    if (!v.is_float()) return Value(static_cast<int64_t>(v.ToDouble()));  // int stays int when precision >= 0
    double d = v.as_float();
    if (!std::isfinite(d)) return v;
    if (precision >= 0) {
      char buf[512];
      std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), d);  // correctly rounded, ties to even
      return Value(std::strtod(buf, nullptr));
    }
    double p = std::pow(10.0, static_cast<double>(-precision));
    return Value(std::nearbyint(d / p) * p);
  }
  double p = std::pow(10.0, static_cast<double>(precision));
  double x = v.ToDouble() * p;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

Value FSum(Interpreter& interp, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "sum", {"attribute", "start"}, line);
  Value total = a.GetOr(1, Value(int64_t{0}));
  for (const auto& item : interp.Iterate(v, line)) {
    Value x = a.Get(0) ? GetPath(interp, item, *a.Get(0), nullptr, line) : item;
    total = Arithmetic(BinaryOp::kAdd, total, x, line, interp);
  }
  return total;
}

Value MinMax(Interpreter& interp, const Value& v, CallArgs& args, int line, bool want_max) {
  ArgReader a(args, want_max ? "max" : "min", {"case_sensitive", "attribute"}, line);
  bool cs = a.Get(0) && a.Get(0)->Truthy();
  std::optional<Value> best, best_key;
  for (const auto& item : interp.Iterate(v, line)) {
    Value key = SortKey(a.Get(1) ? GetPath(interp, item, *a.Get(1), nullptr, line) : item, cs);
    if (!best) {
      best = item;
      best_key = key;
      continue;
    }
    auto lt = want_max ? Less(*best_key, key) : Less(key, *best_key);
    if (!lt) throw TemplateRuntimeError(line, "'<' not supported between instances of '" + key.TypeName() + "' and '" + best_key->TypeName() + "'");
    if (*lt) {
      best = item;
      best_key = key;
    }
  }
  if (!best) return Value::MakeUndefined("No aggregated item, sequence was empty.");
  return *best;
}
Value FMin(Interpreter& i, const Value& v, CallArgs& a, int line) { return MinMax(i, v, a, line, false); }
Value FMax(Interpreter& i, const Value& v, CallArgs& a, int line) { return MinMax(i, v, a, line, true); }

Value FUnique(Interpreter& interp, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "unique", {"case_sensitive", "attribute"}, line);
  bool cs = a.Get(0) && a.Get(0)->Truthy();
  DictData seen;
  std::vector<Value> out;
  for (const auto& item : interp.Iterate(v, line)) {
    Value key = SortKey(a.Get(1) ? GetPath(interp, item, *a.Get(1), nullptr, line) : item, cs);
    if (!DictKey(key)) throw TemplateRuntimeError(line, "unhashable type: '" + key.TypeName() + "'");
    if (seen.Find(key)) continue;
    seen.Set(key, Value(true));
    out.push_back(item);
  }
  return Value::List(std::move(out));
}

Value FSort(Interpreter& interp, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "sort", {"reverse", "case_sensitive", "attribute"}, line);
  bool reverse = a.Get(0) && a.Get(0)->Truthy();
  bool cs = a.Get(1) && a.Get(1)->Truthy();
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& item : interp.Iterate(v, line)) {
    keyed.emplace_back(SortKey(a.Get(2) ? GetPath(interp, item, *a.Get(2), nullptr, line) : item, cs), item);
  }
  StableSort(keyed, reverse, line);
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::List(std::move(out));
}

Value FDictSort(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "dictsort", {"case_sensitive", "by", "reverse"}, line);
  if (!v.is_dict()) throw TemplateRuntimeError(line, "dictsort: expected a mapping, got '" + v.TypeName() + "'");
  bool cs = a.Get(0) && a.Get(0)->Truthy();
  std::string by = a.Get(1) ? StrArg(a.Get(1), "dictsort", line) : "key";
  if (by != "key" && by != "value") throw TemplateRuntimeError(line, "You can only sort by either \"key\" or \"value\"");
  bool reverse = a.Get(2) && a.Get(2)->Truthy();
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, val] : v.as_dict()->entries) {
    keyed.emplace_back(SortKey(by == "key" ? k : val, cs), Value::Tuple({k, val}));
  }
  StableSort(keyed, reverse, line);
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::List(std::move(out));
}

Value FReverse(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "reverse", {}, line);
  if (v.is_string()) {
    std::u32string cps = unicode::Decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(unicode::Encode(cps));
  }
  if (v.is_list()) {
    std::vector<Value> items = v.as_list()->items;
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  throw TemplateRuntimeError(line, "argument must be iterable");
}

Value FBatch(Interpreter& interp, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "batch", {"linecount", "fill_with"}, line);
  if (!a.Get(0)) throw TemplateRuntimeError(line, "batch needs a line count");
  int64_t n = ToIndexInt(*a.Get(0), "batch", line);
  if (n <= 0) throw TemplateRuntimeError(line, "batch: line count must be positive");
  std::vector<Value> out, cur;
  for (const auto& item : interp.Iterate(v, line)) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::List(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (a.Get(1) && !a.Get(1)->is_none()) {
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*a.Get(1));
    }
    out.push_back(Value::List(std::move(cur)));
  }
  return Value::List(std::move(out));
}

Value FCenter(Interpreter& interp, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "center", {"width"}, line);
  CallArgs m;
  m.positional.push_back(a.GetOr(0, Value(int64_t{80})));
  Value method;
  LookupMethod(Value(v.Str()), "center", line, &method);
  return interp.CallValue(method, std::move(m), line);
}

Value FIndent(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "indent", {"width", "first", "blank"}, line);
  std::string ind;
  Value width = a.GetOr(0, Value(int64_t{4}));
  if (width.is_string()) {
    ind = width.as_string();
  } else {
    ind = std::string(static_cast<size_t>(std::clamp<int64_t>(ToIndexInt(width, "indent", line), 0, 1024)), ' ');
  }
  bool first = a.Get(1) && a.Get(1)->Truthy();
  bool blank = a.Get(2) && a.Get(2)->Truthy();
  std::string s = v.Str() + "\n";
  // Python's str.splitlines on the text (after the trailing "\n" Jinja appends).
  CallArgs none;
  std::vector<std::string> lines;
  {
    std::u32string cps = unicode::Decode(s);
    size_t start = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
      char32_t c = cps[i];
      bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                 c == 0x85 || c == 0x2028 || c == 0x2029;
      if (!brk) continue;
      lines.push_back(unicode::Encode(std::u32string_view(cps).substr(start, i - start)));
      if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
      start = i + 1;
    }
    if (start < cps.size()) lines.push_back(unicode::Encode(std::u32string_view(cps).substr(start)));
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? std::string() : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? std::string() : ind) + lines[i];
  }
  if (first) rv = ind + rv;
  return Value(std::move(rv));
}

Value FWordCount(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "wordcount", {}, line);
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : unicode::Decode(v.Str())) {
    bool w = c == '_' || unicode::IsAlpha(c) || unicode::IsDigit(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value FEscape(Interpreter&, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "escape", {}, line);
  std::string out;
  for (char c : v.Str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value(std::move(out));
}

Value FAttr(Interpreter& interp, const Value& v, CallArgs& args, int line) {
  ArgReader a(args, "attr", {"name"}, line);
  std::string name = StrArg(a.Get(0), "attr", line);
  if (v.is_dict() && v.as_dict()->kind == DictData::Kind::kDict) {
    Value m;
    if (LookupMethod(v, name, line, &m)) return m;
    return Value::MakeUndefined("'dict object' has no attribute '" + name + "'");
  }
  return interp.GetAttr(v, name, line);
}

Value FFormat(Interpreter&, const Value& v, CallArgs& args, int line) {
  if (!args.positional.empty() && !args.kwargs.empty()) {
    throw TemplateRuntimeError(line, "can't handle positional and keyword arguments at the same time");
  }
  if (!args.kwargs.empty()) {
    auto d = std::make_shared<DictData>();
    for (const auto& [k, val] : args.kwargs) d->Set(k, val);
    return Value(PercentFormat(v.Str(), Value(std::move(d)), line));
  }
  return Value(PercentFormat(v.Str(), Value::Tuple(args.positional), line));
}

struct FilterEntry {
  const char* name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", FAbs}, {"attr", FAttr}, {"batch", FBatch}, {"capitalize", FCapitalize}, {"center", FCenter},
    {"count", FLength}, {"d", FDefault}, {"default", FDefault}, {"dictsort", FDictSort}, {"e", FEscape},
    {"escape", FEscape}, {"first", FFirst}, {"float", FFloat}, {"format", FFormat}, {"indent", FIndent},
    {"int", FInt}, {"items", FItems}, {"join", FJoin}, {"last", FLast}, {"length", FLength}, {"list", FList},
    {"lower", FLower}, {"map", FMap}, {"max", FMax}, {"min", FMin}, {"reject", FReject},
    {"rejectattr", FRejectAttr}, {"replace", FReplace}, {"reverse", FReverse}, {"round", FRound},
    {"safe", FSafe}, {"select", FSelect}, {"selectattr", FSelectAttr}, {"sort", FSort}, {"string", FString},
    {"sum", FSum}, {"title", FTitle}, {"tojson", FToJson}, {"trim", FTrim}, {"unique", FUnique},
    {"upper", FUpper}, {"wordcount", FWordCount},
};

constexpr const char* kUnsupportedFilters[] = {"filesizeformat", "forceescape", "groupby", "pprint", "random",
                                               "slice", "striptags", "truncate", "urlencode", "urlize",
                                               "wordwrap", "xmlattr"};

}  // namespace

FilterFn FindFilter(const std::string& name, int line) {
  for (const auto& f : kFilters) {
    if (name == f.name) return f.fn;
  }
  for (const char* u : kUnsupportedFilters) {
    if (name == u) throw TemplateUnsupportedError(line, "the '" + name + "' filter");
  }
  return nullptr;
}

}  // namespace vtllm::jinja
