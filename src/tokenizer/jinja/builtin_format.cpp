// Python string formatting: `fmt % args` and str.format(), for the conversions templates use
// (s r d i f e g x o c % and the format-spec mini-language's fill/align/sign/width/precision).
// Anything else is reported as unsupported rather than formatted differently from Python.
// GCC 12 reports a false -Wrestrict inside std::string's operator+ when inlined at -O3
// (GCC bug 105329); it must be silenced before <string> is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/unicode.h"

namespace vtllm::jinja {
namespace {

std::string CFormat(const std::string& spec, double v) {
  char buf[512];
  int n = std::snprintf(buf, sizeof(buf), spec.c_str(), v);
  if (n < 0 || n >= static_cast<int>(sizeof(buf))) return std::string();
  return std::string(buf, static_cast<size_t>(n));
}

std::string CFormatInt(const std::string& spec, long long v) {
  char buf[512];
  int n = std::snprintf(buf, sizeof(buf), spec.c_str(), v);
  if (n < 0 || n >= static_cast<int>(sizeof(buf))) return std::string();
  return std::string(buf, static_cast<size_t>(n));
}

std::string PadTo(std::string s, int64_t width, bool left_align, char32_t fill = ' ') {
  auto len = static_cast<int64_t>(unicode::Length(s));
  if (width <= len) return s;
  std::string pad;
  for (int64_t i = 0; i < width - len; ++i) unicode::Append(pad, fill);
  return left_align ? s + pad : pad + s;
}

std::string Truncate(const std::string& s, int64_t precision) {
  std::u32string cps = unicode::Decode(s);
  if (precision >= static_cast<int64_t>(cps.size())) return s;
  return unicode::Encode(std::u32string_view(cps).substr(0, static_cast<size_t>(precision)));
}

double NumberArg(const Value& v, char conv, int line) {
  if (!v.is_number()) {
    throw TemplateRuntimeError(line, std::string("%") + conv + " format: a real number is required, not " + v.TypeName());
  }
  return v.ToDouble();
}

int64_t IntArg(const Value& v, char conv, int line) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  if (v.is_float()) {
    if (!std::isfinite(v.as_float()) || std::fabs(v.as_float()) > 9.2e18) throw TemplateRuntimeError(line, "cannot convert float to integer");
    return static_cast<int64_t>(v.as_float());
  }
  throw TemplateRuntimeError(line, std::string("%") + conv + " format: a number is required, not " + v.TypeName());
}

}  // namespace

std::string PercentFormat(const std::string& fmt, const Value& args, int line) {
  std::vector<Value> values;
  const DictData* mapping = nullptr;
  if (args.is_list() && args.as_list()->is_tuple) {
    values = args.as_list()->items;
  } else if (args.is_dict()) {
    mapping = args.as_dict().get();
    values.push_back(args);
  } else {
    values.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) throw TemplateRuntimeError(line, "incomplete format");
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) throw TemplateRuntimeError(line, "format requires a mapping");
      const Value* v = mapping->Find(fmt.substr(i + 1, close - i - 1));
      if (!v) throw TemplateRuntimeError(line, "format key " + PyStrRepr(fmt.substr(i + 1, close - i - 1)) + " not found");
      arg = v;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string_view("-+ 0#").find(fmt[i]) != std::string_view::npos) flags.push_back(fmt[i++]);
    std::string width, precision;
    bool has_precision = false;
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) width.push_back(fmt[i++]);
    if (i < fmt.size() && fmt[i] == '*') throw TemplateUnsupportedError(line, "'*' widths in % formatting");
    if (i < fmt.size() && fmt[i] == '.') {
      has_precision = true;
      ++i;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) precision.push_back(fmt[i++]);
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) throw TemplateRuntimeError(line, "incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!arg) {
      if (next >= values.size() || (mapping && values.size() == 1 && used_mapping)) {
        throw TemplateRuntimeError(line, "not enough arguments for format string");
      }
      arg = &values[next++];
    }
    if (width.size() > 6 || precision.size() > 6) throw TemplateRuntimeError(line, "format width too large");
    int64_t w = width.empty() ? 0 : std::stoll(width);
    int64_t p = precision.empty() ? 0 : std::stoll(precision);
    bool left = flags.find('-') != std::string::npos;
    switch (conv) {
      case 's':
      case 'r': {
        std::string s = conv == 's' ? arg->Str() : arg->Repr();
        if (has_precision) s = Truncate(s, p);
        out += PadTo(s, w, left);
        break;
      }
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
        std::string spec = "%" + flags + width + (has_precision ? "." + precision : "") + "ll" + (conv == 'u' || conv == 'i' ? 'd' : conv);
        int64_t v = IntArg(*arg, conv, line);
        if (conv == 'x' || conv == 'X' || conv == 'o') {
          if (v < 0) throw TemplateUnsupportedError(line, "negative numbers with %x/%o");
        }
        out += CFormatInt(spec, static_cast<long long>(v));
        break;
      }
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
        std::string spec = "%" + flags + width + (has_precision ? "." + precision : "") + conv;
        out += CFormat(spec, NumberArg(*arg, conv, line));
        break;
      }
      case 'c': {
        std::string s;
        if (arg->is_string() && unicode::Length(arg->as_string()) == 1) {
          s = arg->as_string();
        } else if (arg->is_int() && arg->as_int() >= 0 && arg->as_int() <= 0x10FFFF) {
          unicode::Append(s, static_cast<char32_t>(arg->as_int()));
        } else {
          throw TemplateRuntimeError(line, "%c requires an int or a single character");
        }
        out += PadTo(s, w, left);
        break;
      }
      default:
        throw TemplateRuntimeError(line, std::string("unsupported format character '") + conv + "'");
    }
  }
  if (!mapping && next < values.size()) throw TemplateRuntimeError(line, "not all arguments converted during string formatting");
  return out;
}

namespace {

struct FormatSpec {
  char32_t fill = ' ';
  char align = '\0';
  char sign = '-';
  bool zero = false;
  int64_t width = 0;
  int64_t precision = -1;
  char type = '\0';
};

FormatSpec ParseSpec(const std::string& spec, int line) {
  FormatSpec f;
  std::u32string s = unicode::Decode(spec);
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    f.fill = s[0];
    f.align = static_cast<char>(s[1]);
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    f.align = static_cast<char>(s[0]);
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) f.sign = static_cast<char>(s[i++]);
  if (i < s.size() && s[i] == '#') throw TemplateUnsupportedError(line, "'#' in format specs");
  if (i < s.size() && s[i] == '0') {
    f.zero = true;
    ++i;
  }
  std::string digits;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') digits.push_back(static_cast<char>(s[i++]));
  if (digits.size() > 6) throw TemplateRuntimeError(line, "format width too large");
  if (!digits.empty()) f.width = std::stoll(digits);
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) throw TemplateUnsupportedError(line, "thousands separators in format specs");
  if (i < s.size() && s[i] == '.') {
    ++i;
    digits.clear();
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') digits.push_back(static_cast<char>(s[i++]));
    if (digits.empty() || digits.size() > 6) throw TemplateRuntimeError(line, "format specifier missing precision");
    f.precision = std::stoll(digits);
  }
  if (i < s.size()) f.type = static_cast<char>(s[i++]);
  if (i != s.size()) throw TemplateRuntimeError(line, "invalid format specifier '" + spec + "'");
  return f;
}

std::string ApplySpec(const Value& v, const FormatSpec& f, int line) {
  std::string body;
  bool negative = false;
  bool numeric = false;
  if (f.type == '\0' || f.type == 's') {
    if (v.is_string() || f.type == 's') {
      if (f.type == 's' && !v.is_string()) throw TemplateRuntimeError(line, "Unknown format code 's' for object of type '" + v.TypeName() + "'");
      body = v.as_string();
      if (f.precision >= 0) body = Truncate(body, f.precision);
    } else if (v.is_number() && f.precision < 0) {
      numeric = true;
      double d = v.ToDouble();
      body = v.is_float() ? PyFloatRepr(std::fabs(d)) : std::to_string(v.is_bool() ? (v.as_bool() ? 1 : 0) : std::llabs(v.as_int()));
      if (v.is_bool() && f.align == '\0' && f.width == 0) return v.Str();
      if (d < 0 || (v.is_float() && std::signbit(d))) negative = true;
    } else if (!v.is_number() && f.precision < 0 && !f.zero && f.sign == '-' && f.align != '=') {
      body = v.Str();
    } else {
      throw TemplateUnsupportedError(line, "this format spec for a " + v.TypeName());
    }
  } else if (f.type == 'd') {
    if (!v.is_int() && !v.is_bool()) throw TemplateRuntimeError(line, "Unknown format code 'd' for object of type '" + v.TypeName() + "'");
    numeric = true;
    int64_t x = v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int();
    body = std::to_string(static_cast<unsigned long long>(x < 0 ? -(x + 1) + 1ULL : static_cast<unsigned long long>(x)));
    if (x < 0) negative = true;
  } else if (f.type == 'f' || f.type == 'F' || f.type == 'e' || f.type == 'E' || f.type == 'g' || f.type == 'G' || f.type == '%') {
    if (!v.is_number()) throw TemplateRuntimeError(line, std::string("Unknown format code '") + f.type + "' for object of type '" + v.TypeName() + "'");
    numeric = true;
    double d = v.ToDouble() * (f.type == '%' ? 100.0 : 1.0);
    int64_t prec = f.precision < 0 ? 6 : f.precision;
    char t = f.type == '%' ? 'f' : f.type;
    body = CFormat("%." + std::to_string(prec) + t, std::fabs(d));
    if (f.type == '%') body += "%";
    if (std::signbit(d)) negative = true;
  } else {
    throw TemplateUnsupportedError(line, std::string("format type '") + f.type + "'");
  }
  std::string sign;
  if (negative) {
    sign.push_back('-');
  } else if (numeric && (f.sign == '+' || f.sign == ' ')) {
    sign.push_back(f.sign);
  }
  char align = f.align ? f.align : (numeric ? '>' : '<');
  char32_t fill = f.fill;
  if (f.zero && !f.align) {
    align = '=';
    fill = '0';
  }
  auto len = static_cast<int64_t>(unicode::Length(sign + body));
  if (f.width <= len) return sign + body;
  int64_t total = f.width - len;
  std::string pad_l, pad_r;
  int64_t left = align == '<' ? 0 : align == '^' ? total / 2 : total;
  for (int64_t i = 0; i < left; ++i) unicode::Append(pad_l, fill);
  for (int64_t i = 0; i < total - left; ++i) unicode::Append(pad_r, fill);
  if (align == '=') return sign + pad_l + body;
  return pad_l + sign + body + pad_r;
}

}  // namespace

std::string StrFormat(const std::string& fmt, const CallArgs& args, int line) {
  std::string out;
  size_t auto_index = 0;
  bool used_auto = false, used_manual = false;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      throw TemplateRuntimeError(line, "Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw TemplateRuntimeError(line, "Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find('{') != std::string::npos) throw TemplateUnsupportedError(line, "nested fields in str.format()");
    i = close;
    std::string spec, conv;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    size_t bang = field.find('!');
    if (bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    if (field.find_first_of(".[") != std::string::npos) throw TemplateUnsupportedError(line, "attribute or index lookups in str.format() fields");
    const Value* v = nullptr;
    if (field.empty()) {
      if (used_manual) throw TemplateRuntimeError(line, "cannot switch from manual field specification to automatic field numbering");
      used_auto = true;
      if (auto_index >= args.positional.size()) throw TemplateRuntimeError(line, "Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
      v = &args.positional[auto_index++];
    } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      if (used_auto) throw TemplateRuntimeError(line, "cannot switch from automatic field numbering to manual field specification");
      used_manual = true;
      size_t idx = field.size() > 6 ? SIZE_MAX : std::stoul(field);
      if (idx >= args.positional.size()) throw TemplateRuntimeError(line, "Replacement index " + field + " out of range for positional args tuple");
      v = &args.positional[idx];
    } else {
      for (const auto& [k, val] : args.kwargs) {
        if (k == field) v = &val;
      }
      if (!v) throw TemplateRuntimeError(line, "KeyError: " + PyStrRepr(field));
    }
    Value converted = *v;
    if (conv == "r") {
      converted = Value(v->Repr());
    } else if (conv == "s") {
      converted = Value(v->Str());
    } else if (!conv.empty()) {
      throw TemplateRuntimeError(line, "Unknown conversion specifier " + conv);
    }
    if (spec.empty()) {
      out += converted.Str();
    } else {
      out += ApplySpec(converted, ParseSpec(spec, line), line);
    }
  }
  return out;
}

}  // namespace vtllm::jinja
