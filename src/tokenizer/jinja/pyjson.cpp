// Python's json.dumps, as transformers' tojson filter calls it:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
// GCC 12 reports a false -Wrestrict inside std::string's operator+ when inlined at -O3
// (GCC bug 105329); it must be silenced before <string> is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/unicode.h"

namespace vtllm::jinja {
namespace {

void EncodeString(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  auto esc = [&](unsigned cp) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
    out += buf;
  };
  for (char32_t c : unicode::Decode(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20) {
      esc(static_cast<unsigned>(c));
    } else if (ensure_ascii && c > 0x7E) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        esc(0xD800 + static_cast<unsigned>(v >> 10));
        esc(0xDC00 + static_cast<unsigned>(v & 0x3FF));
      } else {
        esc(static_cast<unsigned>(c));
      }
    } else {
      unicode::Append(out, c);
    }
  }
  out.push_back('"');
}

std::string FloatJson(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return PyFloatRepr(d);
}

class Dumper {
 public:
  Dumper(const JsonDumpOptions& o, int line) : o_(o), line_(line) {}

  void Dump(std::string& out, const Value& v, int level) {
    if (level > 512) throw TemplateRuntimeError(line_, "tojson: value nested too deeply");
    switch (v.type()) {
      case Value::Type::kNone: out += "null"; return;
      case Value::Type::kBool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Type::kInt: out += std::to_string(v.as_int()); return;
      case Value::Type::kFloat: out += FloatJson(v.as_float()); return;
      case Value::Type::kString: EncodeString(out, v.as_string(), o_.ensure_ascii); return;
      case Value::Type::kList: DumpList(out, v.as_list()->items, level); return;
      case Value::Type::kDict:
        if (v.as_dict()->kind == DictData::Kind::kDict) {
          DumpDict(out, *v.as_dict(), level);
          return;
        }
        break;
      default: break;
    }
    throw TemplateRuntimeError(line_, "Object of type " + v.TypeName() + " is not JSON serializable");
  }

 private:
  std::string Newline(int level) const {
    std::string s = "\n";
    for (int i = 0; i < level; ++i) s += o_.indent;
    return s;
  }

  void DumpList(std::string& out, const std::vector<Value>& items, int level) {
    if (items.empty()) {
      out += "[]";
      return;
    }
    out.push_back('[');
    std::string nl = o_.has_indent ? Newline(level + 1) : "";
    out += nl;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += o_.item_separator + nl;
      Dump(out, items[i], level + 1);
    }
    if (o_.has_indent) out += Newline(level);
    out.push_back(']');
  }

  std::string KeyString(const Value& k) const {
    switch (k.type()) {
      case Value::Type::kString: return k.as_string();
      case Value::Type::kNone: return "null";
      case Value::Type::kBool: return k.as_bool() ? "true" : "false";
      case Value::Type::kInt: return std::to_string(k.as_int());
      case Value::Type::kFloat: return FloatJson(k.as_float());
      default:
        throw TemplateRuntimeError(line_, "tojson: keys must be str, int, float, bool or None, not " + k.TypeName());
    }
  }

  void DumpDict(std::string& out, const DictData& d, int level) {
    if (d.entries.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& e : d.entries) entries.push_back(&e);
    if (o_.sort_keys) {
      bool ok = true;
      std::stable_sort(entries.begin(), entries.end(), [&](const auto* a, const auto* b) {
        auto lt = Less(a->first, b->first);
        if (!lt) ok = false;
        return lt.value_or(false);
      });
      if (!ok) throw TemplateRuntimeError(line_, "tojson(sort_keys=True): keys of different types cannot be ordered");
    }
    out.push_back('{');
    std::string nl = o_.has_indent ? Newline(level + 1) : "";
    out += nl;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) out += o_.item_separator + nl;
      EncodeString(out, KeyString(entries[i]->first), o_.ensure_ascii);
      out += o_.key_separator;
      Dump(out, entries[i]->second, level + 1);
    }
    if (o_.has_indent) out += Newline(level);
    out.push_back('}');
  }

  const JsonDumpOptions& o_;
  int line_;
};

}  // namespace

std::string PyJsonDumps(const Value& v, const JsonDumpOptions& options, int line) {
  std::string out;
  Dumper(options, line).Dump(out, v, 0);
  return out;
}

}  // namespace vtllm::jinja
