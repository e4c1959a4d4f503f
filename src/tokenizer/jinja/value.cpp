// GCC 12 reports a false -Wrestrict inside std::string's operator+ when inlined at -O3
// (GCC bug 105329); it must be silenced before <string> is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include "tokenizer/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "tokenizer/jinja/unicode.h"

namespace vtllm::jinja {

Value Value::List(std::vector<Value> items) {
  auto l = std::make_shared<ListData>();
  l->items = std::move(items);
  return Value(std::move(l));
}

Value Value::Tuple(std::vector<Value> items) {
  auto l = std::make_shared<ListData>();
  l->items = std::move(items);
  l->is_tuple = true;
  return Value(std::move(l));
}

Value Value::Dict() { return Value(std::make_shared<DictData>()); }

double Value::ToDouble() const {
  switch (type()) {
    case Type::kBool: return as_bool() ? 1.0 : 0.0;
    case Type::kInt: return static_cast<double>(as_int());
    case Type::kFloat: return as_float();
    default: return 0.0;
  }
}

bool Value::Truthy() const {
  switch (type()) {
    case Type::kUndefined:
    case Type::kNone: return false;
    case Type::kBool: return as_bool();
    case Type::kInt: return as_int() != 0;
    case Type::kFloat: return as_float() != 0.0;
    case Type::kString: return !as_string().empty();
    case Type::kList: return !as_list()->items.empty();
    case Type::kDict: return as_dict()->kind != DictData::Kind::kDict || !as_dict()->entries.empty();
    case Type::kCallable: return true;
  }
  return false;
}

std::string Value::TypeName() const {
  switch (type()) {
    case Type::kUndefined: return "Undefined";
    case Type::kNone: return "NoneType";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kString: return "str";
    case Type::kList: return as_list()->is_tuple ? "tuple" : "list";
    case Type::kDict:
      switch (as_dict()->kind) {
        case DictData::Kind::kNamespace: return "Namespace";
        case DictData::Kind::kLoop: return "LoopContext";
        case DictData::Kind::kDict: return "dict";
      }
      return "dict";
    case Type::kCallable: return "function";
  }
  return "object";
}

static std::string DictRepr(const DictData& d) {
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : d.entries) {
    if (!first) s += ", ";
    first = false;
    s += k.Repr();
    s += ": ";
    s += v.Repr();
  }
  return s + "}";
}

std::string Value::Str() const {
  switch (type()) {
    case Type::kUndefined: return "";
    case Type::kString: return as_string();
    default: return Repr();
  }
}

std::string Value::Repr() const {
  switch (type()) {
    case Type::kUndefined: return "";
    case Type::kNone: return "None";
    case Type::kBool: return as_bool() ? "True" : "False";
    case Type::kInt: return std::to_string(as_int());
    case Type::kFloat: return PyFloatRepr(as_float());
    case Type::kString: return PyStrRepr(as_string());
    case Type::kList: {
      const auto& l = *as_list();
      std::string s = l.is_tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) s += ", ";
        s += l.items[i].Repr();
      }
      if (l.is_tuple && l.items.size() == 1) s += ",";
      return s + (l.is_tuple ? ")" : "]");
    }
    case Type::kDict: {
      const auto& d = *as_dict();
      if (d.kind == DictData::Kind::kNamespace) return "<Namespace " + DictRepr(d) + ">";
      if (d.kind == DictData::Kind::kLoop) return "<LoopContext>";
      return DictRepr(d);
    }
    case Type::kCallable: return "<function " + as_callable()->name() + ">";
  }
  return "";
}

std::optional<std::string> DictKey(const Value& key) {
  switch (key.type()) {
    case Value::Type::kString: return "s" + key.as_string();
    case Value::Type::kInt: return "i" + std::to_string(key.as_int());
    case Value::Type::kBool: return std::string(key.as_bool() ? "i1" : "i0");
    case Value::Type::kFloat: {
      double f = key.as_float();
      if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18) {
        return "i" + std::to_string(static_cast<int64_t>(f));
      }
      return "f" + PyFloatRepr(f);
    }
    case Value::Type::kNone: return std::string("n");
    case Value::Type::kList: {
      if (!key.as_list()->is_tuple) return std::nullopt;
      std::string s = "t(";
      for (const auto& item : key.as_list()->items) {
        auto k = DictKey(item);
        if (!k) return std::nullopt;
        s += std::to_string(k->size()) + ":" + *k;
      }
      return s + ")";
    }
    default: return std::nullopt;
  }
}

const Value* DictData::Find(const Value& key) const {
  auto k = DictKey(key);
  if (!k) return nullptr;
  auto it = index_.find(*k);
  return it == index_.end() ? nullptr : &entries[it->second].second;
}

const Value* DictData::Find(std::string_view key) const {
  std::string k = "s";
  k += key;
  auto it = index_.find(k);
  return it == index_.end() ? nullptr : &entries[it->second].second;
}

void DictData::Set(Value key, Value value) {
  auto k = DictKey(key);
  if (!k) throw std::invalid_argument("unhashable type: '" + key.TypeName() + "'");
  auto it = index_.find(*k);
  if (it != index_.end()) {
    entries[it->second].second = std::move(value);
    return;
  }
  index_.emplace(std::move(*k), entries.size());
  entries.emplace_back(std::move(key), std::move(value));
}

bool Equal(const Value& a, const Value& b) {
  using T = Value::Type;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.ToDouble() == b.ToDouble();
    int64_t x = a.is_bool() ? (a.as_bool() ? 1 : 0) : a.as_int();
    int64_t y = b.is_bool() ? (b.as_bool() ? 1 : 0) : b.as_int();
    return x == y;
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case T::kUndefined:
    case T::kNone: return true;
    case T::kString: return a.as_string() == b.as_string();
    case T::kList: {
      const auto& x = *a.as_list();
      const auto& y = *b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!Equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case T::kDict: {
      const auto& x = *a.as_dict();
      const auto& y = *b.as_dict();
      if (x.kind != DictData::Kind::kDict || y.kind != DictData::Kind::kDict) return &x == &y;
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.Find(k);
        if (!other || !Equal(v, *other)) return false;
      }
      return true;
    }
    case T::kCallable: return a.as_callable() == b.as_callable();
    default: return false;
  }
}

std::optional<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.ToDouble() < b.ToDouble();
    int64_t x = a.is_bool() ? (a.as_bool() ? 1 : 0) : a.as_int();
    int64_t y = b.is_bool() ? (b.as_bool() ? 1 : 0) : b.as_int();
    return x < y;
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 byte order == code point order
  if (a.is_list() && b.is_list() && a.as_list()->is_tuple == b.as_list()->is_tuple) {
    const auto& x = a.as_list()->items;
    const auto& y = b.as_list()->items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equal(x[i], y[i])) continue;
      return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return std::nullopt;
}

std::string PyFloatRepr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // shortest round-trip digits, e.g. "-1.2345e+17"
  std::string sign;
  size_t pos = 0;
  if (sci[0] == '-') {
    sign = "-";
    pos = 1;
  }
  size_t e = sci.find('e');
  std::string digits;
  for (size_t i = pos; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  int exp10 = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  return out + ebuf;
}

std::string PyStrRepr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : unicode::Decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && !unicode::IsPrintable(c))) {
      char buf[16];
      if (c < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      unicode::Append(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

Value FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::None();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) {
        throw std::invalid_argument("JSON integer " + std::to_string(u) + " is out of the 64-bit range");
      }
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<DictData>();
      for (const auto& [k, v] : j.items()) d->Set(Value(k), FromJson(v));
      return Value(std::move(d));
    }
    default:
      throw std::invalid_argument(std::string("unsupported JSON value of type ") + j.type_name());
  }
}

}  // namespace vtllm::jinja
