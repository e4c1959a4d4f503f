// Global functions (Jinja's range/dict/namespace; transformers' raise_exception and
// strftime_now) and the argument binder the builtins share.
// GCC 12 reports a false -Wrestrict inside std::string's operator+ when inlined at -O3
// (GCC bug 105329); it must be silenced before <string> is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include <ctime>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"

namespace vtllm::jinja {

ArgReader::ArgReader(const CallArgs& args, std::string_view what, std::initializer_list<std::string_view> names,
                     int line, bool extra_positional_ok) {
  std::vector<std::string_view> params(names);
  bound_.assign(params.size(), nullptr);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < params.size()) {
      bound_[i] = &args.positional[i];
    } else if (extra_positional_ok) {
      extra_.push_back(args.positional[i]);
    } else {
      throw TemplateRuntimeError(line, std::string(what) + " takes at most " + std::to_string(params.size()) +
                                           " argument(s) (" + std::to_string(args.positional.size()) + " given)");
    }
  }
  for (const auto& [k, v] : args.kwargs) {
    size_t i = 0;
    while (i < params.size() && params[i] != k) ++i;
    if (i == params.size()) throw TemplateRuntimeError(line, std::string(what) + " got an unexpected keyword argument '" + k + "'");
    if (bound_[i]) throw TemplateRuntimeError(line, std::string(what) + " got multiple values for argument '" + k + "'");
    bound_[i] = &v;
  }
}

int64_t ToIndexInt(const Value& v, std::string_view what, int line) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  if (v.is_undefined()) Interpreter::FailUndefined(v, line);
  throw TemplateRuntimeError(line, std::string(what) + ": expected an integer, got '" + v.TypeName() + "'");
}

std::string ToStr(const Value& v) { return v.Str(); }

namespace {

class Builtin : public Callable {
 public:
  using Fn = Value (*)(Interpreter&, CallArgs&, int);
  Builtin(std::string name, Fn fn) : Callable(std::move(name)), fn_(fn) {}
  Value Call(Interpreter& interp, CallArgs args, int line) override { return fn_(interp, args, line); }

 private:
  Fn fn_;
};

constexpr int64_t kMaxRange = 100000;  // as Jinja's sandbox

Value Range(Interpreter&, CallArgs& args, int line) {
  if (!args.kwargs.empty()) throw TemplateRuntimeError(line, "range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) throw TemplateRuntimeError(line, "range expected 1 to 3 arguments");
  int64_t start = 0, stop, step = 1;
  if (p.size() == 1) {
    stop = ToIndexInt(p[0], "range()", line);
  } else {
    start = ToIndexInt(p[0], "range()", line);
    stop = ToIndexInt(p[1], "range()", line);
    if (p.size() == 3) step = ToIndexInt(p[2], "range()", line);
  }
  if (step == 0) throw TemplateRuntimeError(line, "range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange) {
      throw TemplateRuntimeError(line, "range too big (more than " + std::to_string(kMaxRange) + " items)");
    }
    out.emplace_back(i);
  }
  return Value::List(std::move(out));
}

Value MakeMapping(CallArgs& args, int line, DictData::Kind kind, const char* what) {
  auto d = std::make_shared<DictData>();
  d->kind = kind;
  if (args.positional.size() > 1) throw TemplateRuntimeError(line, std::string(what) + "() takes at most 1 positional argument");
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (!src.is_dict()) throw TemplateRuntimeError(line, std::string(what) + "() positional argument must be a mapping");
    for (const auto& [k, v] : src.as_dict()->entries) d->Set(k, v);
  }
  for (auto& [k, v] : args.kwargs) d->Set(k, v);
  return Value(std::move(d));
}

Value Dict(Interpreter&, CallArgs& args, int line) { return MakeMapping(args, line, DictData::Kind::kDict, "dict"); }
Value Namespace(Interpreter&, CallArgs& args, int line) {
  return MakeMapping(args, line, DictData::Kind::kNamespace, "namespace");
}

Value RaiseException(Interpreter&, CallArgs& args, int line) {
  ArgReader a(args, "raise_exception()", {"message"}, line);
  throw TemplateRaisedError(line, a.Get(0) ? a.Get(0)->Str() : std::string());
}

Value StrftimeNow(Interpreter& interp, CallArgs& args, int line) {
  ArgReader a(args, "strftime_now()", {"format"}, line);
  if (!a.Get(0) || !a.Get(0)->is_string()) throw TemplateRuntimeError(line, "strftime_now() needs a format string");
  const std::string& fmt = a.Get(0)->as_string();
  std::time_t t = interp.Now();
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string out(256 + fmt.size() * 16, '\0');
  size_t n = fmt.empty() ? 0 : std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
  if (n == 0 && !fmt.empty()) throw TemplateRuntimeError(line, "strftime_now(): format produced no output");
  out.resize(n);
  return Value(std::move(out));
}

Value NotSupported(Interpreter&, CallArgs&, int line) {
  throw TemplateUnsupportedError(line, "the cycler(), joiner() and lipsum() globals");
}

}  // namespace

void AddGlobals(Scope& scope) {
  auto add = [&](const char* name, Builtin::Fn fn) {
    scope.Set(name, Value(CallablePtr(std::make_shared<Builtin>(name, fn))));
  };
  add("range", Range);
  add("dict", Dict);
  add("namespace", Namespace);
  add("raise_exception", RaiseException);
  add("strftime_now", StrftimeNow);
  add("cycler", NotSupported);
  add("joiner", NotSupported);
  add("lipsum", NotSupported);
}

}  // namespace vtllm::jinja
