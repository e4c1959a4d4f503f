// Jinja's built-in tests (`x is defined`, `x is string`, ...).
// GCC 12 reports a false -Wrestrict inside std::string's operator+ when inlined at -O3
// (GCC bug 105329); it must be silenced before <string> is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <cmath>
#include <cstring>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/unicode.h"

namespace vtllm::jinja {
namespace {

const Value& Arg(CallArgs& args, const char* test, int line) {
  if (args.positional.size() != 1 || !args.kwargs.empty()) {
    throw TemplateRuntimeError(line, std::string("test '") + test + "' takes exactly one argument");
  }
  return args.positional[0];
}

void NoArgs(CallArgs& args, const char* test, int line) {
  if (!args.positional.empty() || !args.kwargs.empty()) {
    throw TemplateRuntimeError(line, std::string("test '") + test + "' takes no arguments");
  }
}

bool Compare(const Value& a, const Value& b, int which, int line) {
  if (which == 0) return Equal(a, b);
  if (which == 1) return !Equal(a, b);
  if (a.is_undefined()) Interpreter::FailUndefined(a, line);
  if (b.is_undefined()) Interpreter::FailUndefined(b, line);
  auto lt = (which == 2 || which == 5) ? Less(a, b) : Less(b, a);
  if (!lt) throw TemplateRuntimeError(line, "'<' not supported between instances of '" + a.TypeName() + "' and '" + b.TypeName() + "'");
  switch (which) {
    case 2: return *lt;                       // a < b
    case 3: return !*lt;                      // a <= b  <=> !(b < a)
    case 4: return *lt;                       // a > b   <=> b < a
    case 5: return !*lt;                      // a >= b  <=> !(a < b)
  }
  return false;
}

#define SIMPLE_TEST(fn, name, expr)                                \
  bool fn(Interpreter&, const Value& v, CallArgs& args, int line) { \
    NoArgs(args, name, line);                                      \
    return (expr);                                                 \
  }

SIMPLE_TEST(TDefined, "defined", !v.is_undefined())
SIMPLE_TEST(TUndefined, "undefined", v.is_undefined())
SIMPLE_TEST(TNone, "none", v.is_none())
SIMPLE_TEST(TBoolean, "boolean", v.is_bool())
SIMPLE_TEST(TFalse, "false", v.is_bool() && !v.as_bool())
SIMPLE_TEST(TTrue, "true", v.is_bool() && v.as_bool())
SIMPLE_TEST(TInteger, "integer", v.is_int())
SIMPLE_TEST(TFloat, "float", v.is_float())
SIMPLE_TEST(TNumber, "number", v.is_number())
SIMPLE_TEST(TString, "string", v.is_string())
SIMPLE_TEST(TMapping, "mapping", v.is_dict() && v.as_dict()->kind == DictData::Kind::kDict)
SIMPLE_TEST(TIterable, "iterable", v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && v.as_dict()->kind == DictData::Kind::kDict))
SIMPLE_TEST(TSequence, "sequence", v.is_string() || v.is_list() || (v.is_dict() && v.as_dict()->kind == DictData::Kind::kDict))
SIMPLE_TEST(TCallable, "callable", v.is_callable())
SIMPLE_TEST(TEscaped, "escaped", (static_cast<void>(v), false))

bool TLower(Interpreter&, const Value& v, CallArgs& args, int line) {
  NoArgs(args, "lower", line);
  if (!v.is_string()) return false;
  bool any = false;
  for (char32_t c : unicode::Decode(v.as_string())) {
    if (unicode::IsUpper(c)) return false;
    if (unicode::IsLower(c)) any = true;
  }
  return any;
}

bool TUpper(Interpreter&, const Value& v, CallArgs& args, int line) {
  NoArgs(args, "upper", line);
  if (!v.is_string()) return false;
  bool any = false;
  for (char32_t c : unicode::Decode(v.as_string())) {
    if (unicode::IsLower(c)) return false;
    if (unicode::IsUpper(c)) any = true;
  }
  return any;
}

int64_t IntOperand(const Value& v, const char* test, int line) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  if (v.is_undefined()) Interpreter::FailUndefined(v, line);
  throw TemplateRuntimeError(line, std::string("test '") + test + "' needs an integer, got '" + v.TypeName() + "'");
}

bool TOdd(Interpreter&, const Value& v, CallArgs& args, int line) {
  NoArgs(args, "odd", line);
  return IntOperand(v, "odd", line) % 2 != 0;
}
bool TEven(Interpreter&, const Value& v, CallArgs& args, int line) {
  NoArgs(args, "even", line);
  return IntOperand(v, "even", line) % 2 == 0;
}
bool TDivisibleBy(Interpreter&, const Value& v, CallArgs& args, int line) {
  int64_t d = IntOperand(Arg(args, "divisibleby", line), "divisibleby", line);
  if (d == 0) throw TemplateRuntimeError(line, "integer division or modulo by zero");
  return IntOperand(v, "divisibleby", line) % d == 0;
}

bool TSameAs(Interpreter&, const Value& v, CallArgs& args, int line) {
  const Value& o = Arg(args, "sameas", line);
  if (v.type() != o.type()) return false;
  switch (v.type()) {
    case Value::Type::kNone: return true;
    case Value::Type::kBool: return v.as_bool() == o.as_bool();
    case Value::Type::kList: return v.as_list() == o.as_list();
    case Value::Type::kDict: return v.as_dict() == o.as_dict();
    case Value::Type::kCallable: return v.as_callable() == o.as_callable();
    default:
      throw TemplateUnsupportedError(line, "'is sameas' on " + v.TypeName() + " values (identity of Python objects)");
  }
}

bool TEq(Interpreter&, const Value& v, CallArgs& args, int line) { return Compare(v, Arg(args, "eq", line), 0, line); }
bool TNe(Interpreter&, const Value& v, CallArgs& args, int line) { return Compare(v, Arg(args, "ne", line), 1, line); }
bool TLt(Interpreter&, const Value& v, CallArgs& args, int line) { return Compare(v, Arg(args, "lt", line), 2, line); }
bool TLe(Interpreter&, const Value& v, CallArgs& args, int line) { return Compare(v, Arg(args, "le", line), 3, line); }
bool TGt(Interpreter&, const Value& v, CallArgs& args, int line) { return Compare(v, Arg(args, "gt", line), 4, line); }
bool TGe(Interpreter&, const Value& v, CallArgs& args, int line) { return Compare(v, Arg(args, "ge", line), 5, line); }

bool TIn(Interpreter&, const Value& v, CallArgs& args, int line) {
  const Value& seq = Arg(args, "in", line);
  if (seq.is_string()) {
    if (!v.is_string()) throw TemplateRuntimeError(line, "'in <string>' requires string as left operand");
    return seq.as_string().find(v.as_string()) != std::string::npos;
  }
  if (seq.is_list()) {
    for (const auto& x : seq.as_list()->items) {
      if (Equal(x, v)) return true;
    }
    return false;
  }
  if (seq.is_dict()) return seq.as_dict()->Find(v) != nullptr;
  if (seq.is_undefined()) return false;
  throw TemplateRuntimeError(line, "argument of type '" + seq.TypeName() + "' is not iterable");
}

bool TFilter(Interpreter&, const Value& v, CallArgs& args, int line) {
  NoArgs(args, "filter", line);
  return v.is_string() && FindFilter(v.as_string(), line) != nullptr;
}

bool TTest(Interpreter&, const Value& v, CallArgs& args, int line) {
  NoArgs(args, "test", line);
  return v.is_string() && FindTest(v.as_string(), line) != nullptr;
}

struct TestEntry {
  const char* name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"defined", TDefined}, {"undefined", TUndefined}, {"none", TNone}, {"boolean", TBoolean},
    {"false", TFalse}, {"true", TTrue}, {"integer", TInteger}, {"float", TFloat}, {"number", TNumber},
    {"string", TString}, {"mapping", TMapping}, {"iterable", TIterable}, {"sequence", TSequence},
    {"callable", TCallable}, {"escaped", TEscaped}, {"lower", TLower}, {"upper", TUpper}, {"odd", TOdd},
    {"even", TEven}, {"divisibleby", TDivisibleBy}, {"sameas", TSameAs}, {"eq", TEq}, {"equalto", TEq},
    {"==", TEq}, {"ne", TNe}, {"!=", TNe}, {"lt", TLt}, {"lessthan", TLt}, {"<", TLt}, {"le", TLe},
    {"<=", TLe}, {"gt", TGt}, {"greaterthan", TGt}, {">", TGt}, {"ge", TGe}, {">=", TGe}, {"in", TIn},
    {"filter", TFilter}, {"test", TTest},
};

}  // namespace

TestFn FindTest(const std::string& name, int) {
  for (const auto& t : kTests) {
    if (name == t.name) return t.fn;
  }
  return nullptr;
}

}  // namespace vtllm::jinja
