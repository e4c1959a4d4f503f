// Jinja's built-in filters, tests and globals, transformers' chat-template helpers
// (raise_exception, strftime_now, its tojson), and the Python str/list/dict methods templates
// call. Each family lives in its own .cpp; this header is what the interpreter looks up.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/value.h"

namespace vtllm::jinja {

using FilterFn = Value (*)(Interpreter& interp, const Value& operand, CallArgs& args, int line);
using TestFn = bool (*)(Interpreter& interp, const Value& operand, CallArgs& args, int line);

// nullptr when no such filter/test exists. Filters and tests that Jinja has but this
// interpreter lacks throw TemplateUnsupportedError from here.
FilterFn FindFilter(const std::string& name, int line);
TestFn FindTest(const std::string& name, int line);

// obj.name where obj is a str, list or dict and name is one of its Python methods: a bound
// method; Undefined-valued optional when `name` is no method. Unimplemented Python methods
// throw TemplateUnsupportedError; mutating list/dict methods raise as the sandbox does.
bool LookupMethod(const Value& obj, const std::string& name, int line, Value* out);

// range, dict, namespace, raise_exception, strftime_now (and unsupported cycler/joiner/lipsum).
void AddGlobals(Scope& scope);

// Python's json.dumps as transformers' tojson filter calls it.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string PyJsonDumps(const Value& v, const JsonDumpOptions& options, int line);

// Python str % args and str.format(*args, **kwargs).
std::string PercentFormat(const std::string& fmt, const Value& args, int line);
std::string StrFormat(const std::string& fmt, const CallArgs& args, int line);

// Binds call arguments to parameter names the way Python does for a simple signature
// (positional, then keywords; unknown or duplicate names raise a TypeError-like error).
class ArgReader {
 public:
  ArgReader(const CallArgs& args, std::string_view what, std::initializer_list<std::string_view> names, int line,
            bool extra_positional_ok = false);
  // The i-th parameter, or nullptr when not passed.
  const Value* Get(size_t i) const { return i < bound_.size() ? bound_[i] : nullptr; }
  Value GetOr(size_t i, Value fallback) const {
    const Value* v = Get(i);
    return v ? *v : std::move(fallback);
  }
  // Positional arguments beyond the named ones (when extra_positional_ok).
  const std::vector<Value>& extra() const { return extra_; }

 private:
  std::vector<const Value*> bound_;
  std::vector<Value> extra_;
};

// Helpers shared by the builtin families.
int64_t ToIndexInt(const Value& v, std::string_view what, int line);
std::string ToStr(const Value& v);

}  // namespace vtllm::jinja
