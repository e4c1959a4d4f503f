// Runtime values of the Jinja interpreter, with Python semantics: None/bool/int/float/str,
// lists and tuples, insertion-ordered dicts (also used for namespace() and the loop object),
// callables (macros, globals, bound methods) and Jinja's Undefined.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace vtllm::jinja {

class Interpreter;
class Value;
struct ListData;
struct DictData;
class Callable;
using ListPtr = std::shared_ptr<ListData>;
using DictPtr = std::shared_ptr<DictData>;
using CallablePtr = std::shared_ptr<Callable>;

// Jinja's default Undefined: prints as "", is falsy, iterates as empty; most other uses raise.
// `hint` says why it is undefined ("'foo' is undefined"), for that error.
struct Undefined {
  std::string hint;
};

class Value {
 public:
  // Indices of the variant below.
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() : v_(Undefined{}) {}
  static Value MakeUndefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value None() { return Value(nullptr); }
  explicit Value(Undefined u) : v_(std::move(u)) {}
  explicit Value(std::nullptr_t) : v_(nullptr) {}
  explicit Value(bool b) : v_(b) {}
  explicit Value(int64_t i) : v_(i) {}
  explicit Value(int i) : v_(static_cast<int64_t>(i)) {}
  explicit Value(double d) : v_(d) {}
  explicit Value(std::string s) : v_(std::move(s)) {}
  explicit Value(std::string_view s) : v_(std::string(s)) {}
  explicit Value(const char* s) : v_(std::string(s)) {}
  explicit Value(ListPtr l) : v_(std::move(l)) {}
  explicit Value(DictPtr d) : v_(std::move(d)) {}
  explicit Value(CallablePtr c) : v_(std::move(c)) {}

  static Value List(std::vector<Value> items);
  static Value Tuple(std::vector<Value> items);
  static Value Dict();

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_undefined() const { return type() == Type::kUndefined; }
  bool is_none() const { return type() == Type::kNone; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_int() const { return type() == Type::kInt; }
  bool is_float() const { return type() == Type::kFloat; }
  // Python's numbers.Number: bool counts as an int.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return type() == Type::kString; }
  bool is_list() const { return type() == Type::kList; }
  bool is_dict() const { return type() == Type::kDict; }
  bool is_callable() const { return type() == Type::kCallable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  // Numeric value of an int, bool or float.
  double ToDouble() const;
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ListPtr& as_list() const { return std::get<ListPtr>(v_); }
  const DictPtr& as_dict() const { return std::get<DictPtr>(v_); }
  const CallablePtr& as_callable() const { return std::get<CallablePtr>(v_); }
  const Undefined& as_undefined() const { return std::get<Undefined>(v_); }

  // Python truthiness (Undefined is falsy).
  bool Truthy() const;
  // Python str(): what `{{ value }}` prints. Undefined prints as "".
  std::string Str() const;
  // Python repr().
  std::string Repr() const;
  // Python's type name, for error messages ("str", "int", "dict", "NoneType", "Undefined").
  std::string TypeName() const;

 private:
  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string, ListPtr, DictPtr,
               CallablePtr>
      v_;
};

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
};

// An insertion-ordered mapping with Python dict key semantics for hashable scalars
// (1, 1.0 and True are the same key).
struct DictData {
  enum class Kind { kDict, kNamespace, kLoop };
  Kind kind = Kind::kDict;
  std::vector<std::pair<Value, Value>> entries;

  // For Kind::kLoop: the loop's items and the current position; its fields (index, first,
  // ...) are computed on access by LoopField instead of being stored per iteration.
  std::shared_ptr<const std::vector<Value>> loop_items;
  size_t loop_index = 0;
  std::optional<Value> LoopField(std::string_view name) const;

  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  void Set(Value key, Value value);
  void Set(std::string_view key, Value value) { Set(Value(key), std::move(value)); }
  size_t size() const { return entries.size(); }

 private:
  std::unordered_map<std::string, size_t> index_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> kwargs;
};

class Callable {
 public:
  explicit Callable(std::string name) : name_(std::move(name)) {}
  virtual ~Callable() = default;
  virtual Value Call(Interpreter& interp, CallArgs args, int line) = 0;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

// Key used to hash a dict key with Python semantics; nullopt for unhashable values.
std::optional<std::string> DictKey(const Value& key);

// Python ==.
bool Equal(const Value& a, const Value& b);
// Python <; nullopt when the types are not ordered against each other (a TypeError in Python).
std::optional<bool> Less(const Value& a, const Value& b);

// Python float repr ("1.0", "1e-05", "1e+16", "0.30000000000000004").
std::string PyFloatRepr(double x);
// Python repr() of a str.
std::string PyStrRepr(std::string_view s);

// Conversion from JSON (objects keep their key order) into values.
Value FromJson(const nlohmann::ordered_json& j);

}  // namespace vtllm::jinja
