// GCC 12 reports a false -Wrestrict inside std::string's operator+ when inlined at -O3
// (GCC bug 105329); it must be silenced before <string> is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include "tokenizer/jinja/interpreter.h"

#include <cmath>
#include <limits>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/unicode.h"

namespace vtllm::jinja {

const Value* Scope::Lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    auto it = s->vars_.find(name);
    if (it != s->vars_.end()) return &it->second;
  }
  return nullptr;
}

namespace {

// A macro refers to the scope it was defined in without owning it: the scope holds the
// macro, so an owning reference would be a cycle that leaks every render using macros.
class MacroCallable : public Callable {
 public:
  explicit MacroCallable(Interpreter::MacroDef def)
      : Callable(def.name), closure_(def.closure), def_(std::move(def)) {
    def_.closure.reset();
  }
  Value Call(Interpreter& interp, CallArgs args, int line) override {
    Interpreter::MacroDef def = def_;
    def.closure = closure_.lock();
    if (!def.closure) throw TemplateRuntimeError(line, "macro '" + def.name + "' called after its scope ended");
    return interp.CallMacro(def, std::move(args), line);
  }

 private:
  std::weak_ptr<Scope> closure_;
  Interpreter::MacroDef def_;
};

class LoopCycle : public Callable {
 public:
  explicit LoopCycle(size_t index) : Callable("loop.cycle"), index_(index) {}
  Value Call(Interpreter&, CallArgs args, int line) override {
    if (args.positional.empty()) throw TemplateRuntimeError(line, "loop.cycle() needs at least one argument");
    return args.positional[index_ % args.positional.size()];
  }

 private:
  size_t index_;
};

class Unsupported : public Callable {
 public:
  explicit Unsupported(std::string what) : Callable(what) {}
  Value Call(Interpreter&, CallArgs, int line) override { throw TemplateUnsupportedError(line, name()); }
};

int64_t AsInt64(const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); }
bool IsIntLike(const Value& v) { return v.is_int() || v.is_bool(); }

[[noreturn]] void TypeError(int line, const std::string& msg) { throw TemplateRuntimeError(line, msg); }

std::string OpSymbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSub: return "-";
    case BinaryOp::kMul: return "*";
    case BinaryOp::kDiv: return "/";
    case BinaryOp::kFloorDiv: return "//";
    case BinaryOp::kMod: return "%";
    case BinaryOp::kPow: return "**";
    case BinaryOp::kConcat: return "~";
    case BinaryOp::kAnd: return "and";
    case BinaryOp::kOr: return "or";
  }
  return "?";
}

[[noreturn]] void Unsupported2(BinaryOp op, const Value& a, const Value& b, int line) {
  TypeError(line, "unsupported operand type(s) for " + OpSymbol(op) + ": '" + a.TypeName() + "' and '" + b.TypeName() + "'");
}

Value Repeat(const std::vector<Value>& items, bool tuple, int64_t n, int line, const Interpreter& interp) {
  std::vector<Value> out;
  if (n > 0) {
    interp.CheckSize(items.size() * static_cast<size_t>(n) * sizeof(Value), line);
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  }
  return tuple ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

}  // namespace

std::optional<Value> DictData::LoopField(std::string_view name) const {
  const size_t n = loop_items ? loop_items->size() : 0;
  const size_t i = loop_index;
  auto I = [](size_t v) { return Value(static_cast<int64_t>(v)); };
  if (name == "index0") return I(i);
  if (name == "index") return I(i + 1);
  if (name == "revindex0") return I(n - i - 1);
  if (name == "revindex") return I(n - i);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i + 1 == n);
  if (name == "length") return I(n);
  if (name == "depth") return Value(1);  // only recursive loops (unsupported) go deeper
  if (name == "depth0") return Value(0);
  if (name == "previtem") return i > 0 ? (*loop_items)[i - 1] : Value::MakeUndefined("there is no previous item");
  if (name == "nextitem") return i + 1 < n ? (*loop_items)[i + 1] : Value::MakeUndefined("there is no next item");
  if (name == "cycle") return Value(CallablePtr(std::make_shared<LoopCycle>(i)));
  if (name == "changed") return Value(CallablePtr(std::make_shared<Unsupported>("loop.changed()")));
  return std::nullopt;
}

Value Arithmetic(BinaryOp op, const Value& a, const Value& b, int line, const Interpreter& interp) {
  if (a.is_undefined()) Interpreter::FailUndefined(a, line);
  if (b.is_undefined()) Interpreter::FailUndefined(b, line);
  bool nums = a.is_number() && b.is_number();
  bool ints = IsIntLike(a) && IsIntLike(b);
  switch (op) {
    case BinaryOp::kAdd:
      if (ints) {
        int64_t r;
        if (__builtin_add_overflow(AsInt64(a), AsInt64(b), &r)) TypeError(line, "integer overflow");
        return Value(r);
      }
      if (nums) return Value(a.ToDouble() + b.ToDouble());
      if (a.is_string() && b.is_string()) {
        interp.CheckSize(a.as_string().size() + b.as_string().size(), line);
        return Value(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list() && a.as_list()->is_tuple == b.as_list()->is_tuple) {
        std::vector<Value> items = a.as_list()->items;
        items.insert(items.end(), b.as_list()->items.begin(), b.as_list()->items.end());
        return a.as_list()->is_tuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
      }
      if (a.is_string()) TypeError(line, "can only concatenate str (not \"" + b.TypeName() + "\") to str");
      if (a.is_list()) TypeError(line, "can only concatenate " + a.TypeName() + " (not \"" + b.TypeName() + "\") to " + a.TypeName());
      Unsupported2(op, a, b, line);
    case BinaryOp::kSub:
      if (ints) {
        int64_t r;
        if (__builtin_sub_overflow(AsInt64(a), AsInt64(b), &r)) TypeError(line, "integer overflow");
        return Value(r);
      }
      if (nums) return Value(a.ToDouble() - b.ToDouble());
      Unsupported2(op, a, b, line);
    case BinaryOp::kMul:
      if (ints) {
        int64_t r;
        if (__builtin_mul_overflow(AsInt64(a), AsInt64(b), &r)) TypeError(line, "integer overflow");
        return Value(r);
      }
      if (nums) return Value(a.ToDouble() * b.ToDouble());
      if ((a.is_string() && IsIntLike(b)) || (IsIntLike(a) && b.is_string())) {
        const std::string& s = a.is_string() ? a.as_string() : b.as_string();
        int64_t n = a.is_string() ? AsInt64(b) : AsInt64(a);
        if (n <= 0) return Value(std::string());
        interp.CheckSize(s.size() * static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 40)), line);
        std::string out;
        out.reserve(s.size() * static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) out += s;
        return Value(std::move(out));
      }
      if ((a.is_list() && IsIntLike(b)) || (IsIntLike(a) && b.is_list())) {
        const Value& l = a.is_list() ? a : b;
        int64_t n = a.is_list() ? AsInt64(b) : AsInt64(a);
        return Repeat(l.as_list()->items, l.as_list()->is_tuple, std::min<int64_t>(n, int64_t{1} << 40), line, interp);
      }
      Unsupported2(op, a, b, line);
    case BinaryOp::kDiv:
      if (nums) {
        if (b.ToDouble() == 0.0) TypeError(line, "division by zero");
        return Value(a.ToDouble() / b.ToDouble());
      }
      Unsupported2(op, a, b, line);
    case BinaryOp::kFloorDiv:
      if (ints) {
        int64_t x = AsInt64(a), y = AsInt64(b);
        if (y == 0) TypeError(line, "integer division or modulo by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) TypeError(line, "integer overflow");
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return Value(q);
      }
      if (nums) {
        if (b.ToDouble() == 0.0) TypeError(line, "float floor division by zero");
        return Value(std::floor(a.ToDouble() / b.ToDouble()));
      }
      Unsupported2(op, a, b, line);
    case BinaryOp::kMod:
      if (a.is_string()) return Value(PercentFormat(a.as_string(), b, line));
      if (ints) {
        int64_t x = AsInt64(a), y = AsInt64(b);
        if (y == 0) TypeError(line, "integer division or modulo by zero");
        if (y == -1) return Value(int64_t{0});
        int64_t r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return Value(r);
      }
      if (nums) {
        double x = a.ToDouble(), y = b.ToDouble();
        if (y == 0.0) TypeError(line, "float modulo");
        double r = std::fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return Value(r);
      }
      Unsupported2(op, a, b, line);
    case BinaryOp::kPow:
      if (ints && AsInt64(b) >= 0) {
        int64_t base = AsInt64(a), e = AsInt64(b), r = 1;
        while (e > 0) {
          if (e & 1) {
            if (__builtin_mul_overflow(r, base, &r)) TypeError(line, "integer overflow");
          }
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) TypeError(line, "integer overflow");
        }
        return Value(r);
      }
      if (nums) {
        if (a.ToDouble() == 0.0 && b.ToDouble() < 0) TypeError(line, "0.0 cannot be raised to a negative power");
        return Value(std::pow(a.ToDouble(), b.ToDouble()));
      }
      Unsupported2(op, a, b, line);
    default:
      break;
  }
  Unsupported2(op, a, b, line);
}

void Interpreter::FailUndefined(const Value& v, int line) {
  std::string hint = v.is_undefined() ? v.as_undefined().hint : std::string();
  throw TemplateRuntimeError(line, hint.empty() ? "value is undefined" : hint);
}

void Interpreter::CheckSize(size_t bytes, int line) const {
  if (bytes > limits_.max_output_bytes) {
    throw TemplateRuntimeError(line, "string of " + std::to_string(bytes) + " bytes exceeds the render limit of " +
                                         std::to_string(limits_.max_output_bytes));
  }
}

void Interpreter::Step(int line) {
  if (++steps_ > limits_.max_steps) {
    throw TemplateRuntimeError(line, "template exceeded " + std::to_string(limits_.max_steps) + " evaluation steps");
  }
}

void Interpreter::Append(std::string& out, const std::string& s, int line) const {
  CheckSize(out.size() + s.size(), line);
  out += s;
}

std::string Interpreter::Render(const Body& body, const ScopePtr& globals) {
  std::string out;
  auto scope = std::make_shared<Scope>(globals);
  ExecBody(body, scope, out);
  return out;
}

Interpreter::Flow Interpreter::ExecBody(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& s : body) {
    Flow f = Exec(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::Exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  Step(s.line);
  switch (s.kind) {
    case StmtKind::kText:
      Append(out, static_cast<const TextStmt&>(s).text, s.line);
      return Flow::kNormal;
    case StmtKind::kOutput: {
      Value v = Eval(*static_cast<const OutputStmt&>(s).expr, scope);
      if (v.is_callable()) {
        // Python prints "<bound method ...>" with an address; no faithful rendering exists.
        throw TemplateUnsupportedError(s.line, "printing a function or method object ('" + v.as_callable()->name() + "')");
      }
      if (!v.is_undefined()) Append(out, v.Str(), s.line);
      return Flow::kNormal;
    }
    case StmtKind::kIf: {
      const auto& st = static_cast<const IfStmt&>(s);
      for (const auto& [cond, body] : st.branches) {
        if (Eval(*cond, scope).Truthy()) return ExecBody(body, scope, out);
      }
      return ExecBody(st.otherwise, scope, out);
    }
    case StmtKind::kFor:
      ExecFor(static_cast<const ForStmt&>(s), scope, out);
      return Flow::kNormal;
    case StmtKind::kSet: {
      const auto& st = static_cast<const SetStmt&>(s);
      Assign(st.target, Eval(*st.value, scope), scope, s.line);
      return Flow::kNormal;
    }
    case StmtKind::kSetBlock: {
      const auto& st = static_cast<const SetBlockStmt&>(s);
      std::string captured;
      ExecBody(st.body, scope, captured);
      Value v(std::move(captured));
      if (st.filter) v = ApplyFilterChain(*st.filter, std::move(v), scope);
      Assign(st.target, std::move(v), scope, s.line);
      return Flow::kNormal;
    }
    case StmtKind::kMacro: {
      const auto& st = static_cast<const MacroStmt&>(s);
      MacroDef def{&st.params, &st.body, scope, st.name};
      scope->Set(st.name, Value(CallablePtr(std::make_shared<MacroCallable>(std::move(def)))));
      return Flow::kNormal;
    }
    case StmtKind::kCallBlock: {
      const auto& st = static_cast<const CallBlockStmt&>(s);
      const auto& call = static_cast<const CallExpr&>(*st.call);
      MacroDef def{&st.params, &st.body, scope, "caller"};
      Value fn = Eval(*call.callee, scope);
      CallArgs args = EvalArgs(call.args, scope);
      args.kwargs.emplace_back("caller", Value(CallablePtr(std::make_shared<MacroCallable>(std::move(def)))));
      Value v = CallValue(fn, std::move(args), s.line);
      if (!v.is_undefined()) Append(out, v.Str(), s.line);
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      const auto& st = static_cast<const FilterBlockStmt&>(s);
      std::string captured;
      ExecBody(st.body, scope, captured);
      Value v = ApplyFilterChain(*st.filter, Value(std::move(captured)), scope);
      if (!v.is_undefined()) Append(out, v.Str(), s.line);
      return Flow::kNormal;
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kGeneration:
      return ExecBody(static_cast<const GenerationStmt&>(s).body, scope, out);
  }
  return Flow::kNormal;
}

void Interpreter::ExecFor(const ForStmt& s, const ScopePtr& scope, std::string& out) {
  std::vector<Value> items = Iterate(Eval(*s.iterable, scope), s.iterable->line);
  if (s.filter) {
    std::vector<Value> kept;
    for (auto& item : items) {
      Step(s.line);
      auto probe = std::make_shared<Scope>(scope);
      Assign(s.target, item, probe, s.line);
      if (Eval(*s.filter, probe).Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    ExecBody(s.otherwise, std::make_shared<Scope>(scope), out);
    return;
  }
  auto shared_items = std::make_shared<const std::vector<Value>>(std::move(items));
  const size_t n = shared_items->size();
  for (size_t i = 0; i < n; ++i) {
    Step(s.line);
    auto iter_scope = std::make_shared<Scope>(scope);
    auto loop = std::make_shared<DictData>();
    loop->kind = DictData::Kind::kLoop;
    loop->loop_items = shared_items;
    loop->loop_index = i;
    iter_scope->Set("loop", Value(std::move(loop)));
    Assign(s.target, (*shared_items)[i], iter_scope, s.line);
    if (ExecBody(s.body, iter_scope, out) == Flow::kBreak) break;
  }
}

void Interpreter::Assign(const Target& t, Value v, const ScopePtr& scope, int line) {
  if (!t.attr.empty()) {
    const Value* ns = scope->Lookup(t.names[0]);
    if (!ns || !ns->is_dict() || ns->as_dict()->kind != DictData::Kind::kNamespace) {
      throw TemplateRuntimeError(line, "cannot assign attribute '" + t.attr + "' on non-namespace object '" +
                                           t.names[0] + "'");
    }
    ns->as_dict()->Set(t.attr, std::move(v));
    return;
  }
  if (!t.is_tuple) {
    scope->Set(t.names[0], std::move(v));
    return;
  }
  std::vector<Value> parts = Iterate(v, line);
  if (parts.size() != t.names.size()) {
    throw TemplateRuntimeError(line, "cannot unpack " + std::to_string(parts.size()) + " values into " +
                                         std::to_string(t.names.size()) + " names");
  }
  for (size_t i = 0; i < parts.size(); ++i) scope->Set(t.names[i], std::move(parts[i]));
}

Value Interpreter::CallMacro(const MacroDef& def, CallArgs args, int line) {
  if (call_depth_ >= limits_.max_call_depth) {
    throw TemplateRuntimeError(line, "macro calls nested deeper than " + std::to_string(limits_.max_call_depth) +
                                         " (runaway recursion in '" + def.name + "'?)");
  }
  ++call_depth_;
  struct DepthRestore {
    int& d;
    ~DepthRestore() { --d; }
  } restore{call_depth_};
  auto scope = std::make_shared<Scope>(def.closure);
  const auto& params = *def.params;
  std::vector<bool> used_kw(args.kwargs.size(), false);
  for (size_t i = 0; i < params.size(); ++i) {
    const MacroParam& p = params[i];
    Value v;
    bool found = false;
    if (i < args.positional.size()) {
      v = args.positional[i];
      found = true;
    }
    for (size_t k = 0; k < args.kwargs.size(); ++k) {
      if (args.kwargs[k].first == p.name) {
        if (found) throw TemplateRuntimeError(line, "macro '" + def.name + "' got multiple values for argument '" + p.name + "'");
        v = args.kwargs[k].second;
        used_kw[k] = true;
        found = true;
      }
    }
    if (!found) {
      v = p.default_value ? Eval(*p.default_value, scope)
                          : Value::MakeUndefined("parameter '" + p.name + "' was not provided");
    }
    scope->Set(p.name, std::move(v));
  }
  std::vector<Value> varargs;
  for (size_t i = params.size(); i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
  auto kwargs = std::make_shared<DictData>();
  for (size_t k = 0; k < args.kwargs.size(); ++k) {
    if (used_kw[k]) continue;
    if (args.kwargs[k].first == "caller") {
      scope->Set("caller", args.kwargs[k].second);
    } else {
      kwargs->Set(args.kwargs[k].first, args.kwargs[k].second);
    }
  }
  scope->Set("varargs", Value::Tuple(std::move(varargs)));
  scope->Set("kwargs", Value(std::move(kwargs)));
  std::string out;
  ExecBody(*def.body, scope, out);
  return Value(std::move(out));
}

Value Interpreter::CallValue(const Value& fn, CallArgs args, int line) {
  if (fn.is_undefined()) FailUndefined(fn, line);
  if (!fn.is_callable()) throw TemplateRuntimeError(line, "'" + fn.TypeName() + "' object is not callable");
  return fn.as_callable()->Call(*this, std::move(args), line);
}

Value Interpreter::ApplyFilter(const std::string& name, const Value& operand, CallArgs args, int line) {
  FilterFn f = FindFilter(name, line);
  if (!f) throw TemplateRuntimeError(line, "no filter named '" + name + "'");
  return f(*this, operand, args, line);
}

bool Interpreter::ApplyTest(const std::string& name, const Value& operand, CallArgs args, int line) {
  TestFn t = FindTest(name, line);
  if (!t) throw TemplateRuntimeError(line, "no test named '" + name + "'");
  return t(*this, operand, args, line);
}

Value Interpreter::GetAttr(const Value& obj, const std::string& name, int line) {
  if (obj.is_undefined()) FailUndefined(obj, line);
  if (obj.is_dict()) {
    const DictData& d = *obj.as_dict();
    if (d.kind == DictData::Kind::kLoop) {
      if (auto v = d.LoopField(name)) return *v;
      return Value::MakeUndefined("'loop' has no attribute '" + name + "'");
    }
    if (d.kind == DictData::Kind::kDict) {
      Value m;
      if (LookupMethod(obj, name, line, &m)) return m;
    }
    if (const Value* v = d.Find(name)) return *v;
    return Value::MakeUndefined("'" + obj.TypeName() + " object' has no attribute '" + name + "'");
  }
  if (obj.is_string() || obj.is_list()) {
    Value m;
    if (LookupMethod(obj, name, line, &m)) return m;
  }
  return Value::MakeUndefined("'" + obj.TypeName() + " object' has no attribute '" + name + "'");
}

Value Interpreter::GetItem(const Value& obj, const Value& key, int line) {
  if (obj.is_undefined()) FailUndefined(obj, line);
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict()->Find(key)) return *v;
    if (key.is_string()) return GetAttr(obj, key.as_string(), line);
    return Value::MakeUndefined("'" + obj.TypeName() + " object' has no attribute " + key.Repr());
  }
  if ((obj.is_list() || obj.is_string()) && IsIntLike(key)) {
    int64_t i = AsInt64(key);
    if (obj.is_list()) {
      const auto& items = obj.as_list()->items;
      int64_t n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::MakeUndefined("'" + obj.TypeName() + " object' has no element " + key.Repr());
      return items[static_cast<size_t>(i)];
    }
    std::u32string cps = unicode::Decode(obj.as_string());
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::MakeUndefined("'str object' has no element " + key.Repr());
    std::string out;
    unicode::Append(out, cps[static_cast<size_t>(i)]);
    return Value(std::move(out));
  }
  if (key.is_string() && (obj.is_list() || obj.is_string())) return GetAttr(obj, key.as_string(), line);
  return Value::MakeUndefined("'" + obj.TypeName() + " object' has no attribute " + key.Repr());
}

std::vector<Value> Interpreter::Iterate(const Value& v, int line) {
  switch (v.type()) {
    case Value::Type::kUndefined: return {};
    case Value::Type::kList: return v.as_list()->items;
    case Value::Type::kDict: {
      if (v.as_dict()->kind != DictData::Kind::kDict) break;
      std::vector<Value> keys;
      for (const auto& [k, val] : v.as_dict()->entries) keys.push_back(k);
      return keys;
    }
    case Value::Type::kString: {
      std::vector<Value> chars;
      for (char32_t c : unicode::Decode(v.as_string())) {
        std::string s;
        unicode::Append(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default: break;
  }
  throw TemplateRuntimeError(line, "'" + v.TypeName() + "' object is not iterable");
}

CallArgs Interpreter::EvalArgs(const CallArgExprs& a, const ScopePtr& scope) {
  CallArgs args;
  for (const auto& e : a.positional) args.positional.push_back(Eval(*e, scope));
  for (const auto& [k, e] : a.kwargs) args.kwargs.emplace_back(k, Eval(*e, scope));
  return args;
}

Value Interpreter::ApplyFilterChain(const Expr& chain, Value input, const ScopePtr& scope) {
  const auto& f = static_cast<const FilterExpr&>(chain);
  Value operand = f.operand ? ApplyFilterChain(*f.operand, std::move(input), scope) : std::move(input);
  return ApplyFilter(f.name, operand, EvalArgs(f.args, scope), f.line);
}

static bool Contains(const Value& container, const Value& item, int line) {
  switch (container.type()) {
    case Value::Type::kUndefined: return false;
    case Value::Type::kString:
      if (!item.is_string()) {
        throw TemplateRuntimeError(line, "'in <string>' requires string as left operand, not " + item.TypeName());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Type::kList:
      for (const auto& x : container.as_list()->items) {
        if (Equal(x, item)) return true;
      }
      return false;
    case Value::Type::kDict:
      return container.as_dict()->Find(item) != nullptr;
    default:
      throw TemplateRuntimeError(line, "argument of type '" + container.TypeName() + "' is not iterable");
  }
}

Value Interpreter::EvalCompare(const CompareExpr& e, const ScopePtr& scope) {
  Value left = Eval(*e.first, scope);
  for (const auto& [op, rexpr] : e.rest) {
    Value right = Eval(*rexpr, scope);
    bool r = false;
    switch (op) {
      case CompareOp::kEq: r = Equal(left, right); break;
      case CompareOp::kNe: r = !Equal(left, right); break;
      case CompareOp::kIn: r = Contains(right, left, e.line); break;
      case CompareOp::kNotIn: r = !Contains(right, left, e.line); break;
      default: {
        if (left.is_undefined()) FailUndefined(left, e.line);
        if (right.is_undefined()) FailUndefined(right, e.line);
        static const char* kSym[] = {"==", "!=", "<", "<=", ">", ">="};
        std::optional<bool> lt = op == CompareOp::kLt || op == CompareOp::kGe ? Less(left, right) : Less(right, left);
        if (!lt) {
          throw TemplateRuntimeError(e.line, std::string("'") + kSym[static_cast<int>(op)] +
                                                 "' not supported between instances of '" + left.TypeName() +
                                                 "' and '" + right.TypeName() + "'");
        }
        switch (op) {
          case CompareOp::kLt: r = *lt; break;                                // l < r
          case CompareOp::kGt: r = *lt; break;                                // r < l
          case CompareOp::kLe: r = !*lt && (Less(left, right).value_or(false) || Equal(left, right)); break;
          case CompareOp::kGe: r = !*lt && (Less(right, left).value_or(false) || Equal(left, right)); break;
          default: break;
        }
      }
    }
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::EvalSlice(const SliceExpr& e, const ScopePtr& scope) {
  Value obj = Eval(*e.object, scope);
  if (obj.is_undefined()) FailUndefined(obj, e.line);
  auto bound = [&](const ExprPtr& x) -> std::optional<int64_t> {
    if (!x) return std::nullopt;
    Value v = Eval(*x, scope);
    if (v.is_none()) return std::nullopt;
    if (!IsIntLike(v)) throw TemplateRuntimeError(e.line, "slice indices must be integers or None");
    return AsInt64(v);
  };
  std::optional<int64_t> start = bound(e.start), stop = bound(e.stop), step_opt = bound(e.step);
  int64_t step = step_opt.value_or(1);
  if (step == 0) throw TemplateRuntimeError(e.line, "slice step cannot be zero");
  std::u32string cps;
  const std::vector<Value>* items = nullptr;
  int64_t n;
  if (obj.is_string()) {
    cps = unicode::Decode(obj.as_string());
    n = static_cast<int64_t>(cps.size());
  } else if (obj.is_list()) {
    items = &obj.as_list()->items;
    n = static_cast<int64_t>(items->size());
  } else {
    throw TemplateRuntimeError(e.line, "'" + obj.TypeName() + "' object is not subscriptable");
  }
  // Python's slice.indices().
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  int64_t lo = clamp(start, step < 0 ? n - 1 : 0);
  int64_t hi = clamp(stop, step < 0 ? -1 : n);
  std::vector<size_t> idx;
  if (step > 0) {
    for (int64_t i = lo; i < hi; i += step) idx.push_back(static_cast<size_t>(i));
  } else {
    for (int64_t i = lo; i > hi; i += step) idx.push_back(static_cast<size_t>(i));
  }
  if (obj.is_string()) {
    std::string out;
    for (size_t i : idx) unicode::Append(out, cps[i]);
    return Value(std::move(out));
  }
  std::vector<Value> out;
  for (size_t i : idx) out.push_back((*items)[i]);
  return obj.as_list()->is_tuple ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

Value Interpreter::EvalBinary(const BinaryExpr& e, const ScopePtr& scope) {
  if (e.op == BinaryOp::kAnd) {
    Value l = Eval(*e.lhs, scope);
    return l.Truthy() ? Eval(*e.rhs, scope) : l;
  }
  if (e.op == BinaryOp::kOr) {
    Value l = Eval(*e.lhs, scope);
    return l.Truthy() ? l : Eval(*e.rhs, scope);
  }
  Value l = Eval(*e.lhs, scope);
  Value r = Eval(*e.rhs, scope);
  if (e.op == BinaryOp::kConcat) {
    std::string a = l.Str(), b = r.Str();
    CheckSize(a.size() + b.size(), e.line);
    return Value(a + b);
  }
  return Arithmetic(e.op, l, r, e.line, *this);
}

Value Interpreter::Eval(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::kConst: return static_cast<const ConstExpr&>(e).value;
    case ExprKind::kName: {
      const auto& n = static_cast<const NameExpr&>(e);
      if (const Value* v = scope->Lookup(n.name)) return *v;
      return Value::MakeUndefined("'" + n.name + "' is undefined");
    }
    case ExprKind::kList: {
      const auto& l = static_cast<const ListExpr&>(e);
      std::vector<Value> items;
      for (const auto& x : l.items) items.push_back(Eval(*x, scope));
      return l.is_tuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
    }
    case ExprKind::kDict: {
      const auto& d = static_cast<const DictExpr&>(e);
      auto out = std::make_shared<DictData>();
      for (const auto& [k, v] : d.items) {
        Value key = Eval(*k, scope);
        if (!DictKey(key)) throw TemplateRuntimeError(e.line, "unhashable type: '" + key.TypeName() + "'");
        out->Set(std::move(key), Eval(*v, scope));
      }
      return Value(std::move(out));
    }
    case ExprKind::kGetAttr: {
      const auto& g = static_cast<const GetAttrExpr&>(e);
      return GetAttr(Eval(*g.object, scope), g.attr, e.line);
    }
    case ExprKind::kGetItem: {
      const auto& g = static_cast<const GetItemExpr&>(e);
      Value obj = Eval(*g.object, scope);
      return GetItem(obj, Eval(*g.key, scope), e.line);
    }
    case ExprKind::kSlice: return EvalSlice(static_cast<const SliceExpr&>(e), scope);
    case ExprKind::kCall: {
      const auto& c = static_cast<const CallExpr&>(e);
      Value fn = Eval(*c.callee, scope);
      return CallValue(fn, EvalArgs(c.args, scope), e.line);
    }
    case ExprKind::kFilter: {
      const auto& f = static_cast<const FilterExpr&>(e);
      Value operand = Eval(*f.operand, scope);
      return ApplyFilter(f.name, operand, EvalArgs(f.args, scope), e.line);
    }
    case ExprKind::kTest: {
      const auto& t = static_cast<const TestExpr&>(e);
      Value operand = Eval(*t.operand, scope);
      bool r = ApplyTest(t.name, operand, EvalArgs(t.args, scope), e.line);
      return Value(t.negated ? !r : r);
    }
    case ExprKind::kUnary: {
      const auto& u = static_cast<const UnaryExpr&>(e);
      Value v = Eval(*u.operand, scope);
      if (u.op == UnaryOp::kNot) return Value(!v.Truthy());
      if (v.is_undefined()) FailUndefined(v, e.line);
      if (!v.is_number()) {
        throw TemplateRuntimeError(e.line, std::string("bad operand type for unary ") + (u.op == UnaryOp::kNeg ? "-" : "+") +
                                               ": '" + v.TypeName() + "'");
      }
      if (u.op == UnaryOp::kPos) return v.is_bool() ? Value(AsInt64(v)) : v;
      if (v.is_float()) return Value(-v.as_float());
      if (AsInt64(v) == std::numeric_limits<int64_t>::min()) throw TemplateRuntimeError(e.line, "integer overflow");
      return Value(-AsInt64(v));
    }
    case ExprKind::kBinary: return EvalBinary(static_cast<const BinaryExpr&>(e), scope);
    case ExprKind::kCompare: return EvalCompare(static_cast<const CompareExpr&>(e), scope);
    case ExprKind::kCondExpr: {
      const auto& c = static_cast<const CondExpr&>(e);
      if (Eval(*c.cond, scope).Truthy()) return Eval(*c.then, scope);
      if (c.otherwise) return Eval(*c.otherwise, scope);
      return Value::MakeUndefined("the inline if-expression evaluated to false and no else section was defined");
    }
  }
  return Value();
}

}  // namespace vtllm::jinja
