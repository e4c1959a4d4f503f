// Tree-walking interpreter for parsed templates, with Jinja's scoping (a for-loop iteration and
// a macro call get their own scope; `if` does not; namespace() objects are the way to carry
// state out of a loop) and Python value semantics.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace vtllm::jinja {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent_(std::move(parent)) {}
  const Value* Lookup(const std::string& name) const;
  void Set(const std::string& name, Value value) { vars_[name] = std::move(value); }

 private:
  std::unordered_map<std::string, Value> vars_;
  std::shared_ptr<Scope> parent_;
};
using ScopePtr = std::shared_ptr<Scope>;

// Bounds that turn runaway templates into errors instead of hangs or exhaustion.
struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // any single string, including the output
  int max_call_depth = 64;                      // nested macro calls
  uint64_t max_steps = 20'000'000;              // statements executed + loop iterations
};

class Interpreter {
 public:
  Interpreter(RenderLimits limits, std::function<std::time_t()> clock)
      : limits_(limits), clock_(std::move(clock)) {}

  // Renders `body` with `globals` as the outermost scope.
  std::string Render(const Body& body, const ScopePtr& globals);

  // --- services for builtins ---
  Value CallValue(const Value& fn, CallArgs args, int line);
  Value ApplyFilter(const std::string& name, const Value& operand, CallArgs args, int line);
  bool ApplyTest(const std::string& name, const Value& operand, CallArgs args, int line);
  // Jinja's getattr (obj.name) and getitem (obj[key]) semantics.
  Value GetAttr(const Value& obj, const std::string& name, int line);
  Value GetItem(const Value& obj, const Value& key, int line);
  // Python iteration: list/tuple items, dict keys, string characters; Undefined is empty.
  std::vector<Value> Iterate(const Value& v, int line);
  // Throws if a string of `bytes` would exceed the output limit.
  void CheckSize(size_t bytes, int line) const;
  std::time_t Now() const { return clock_(); }
  [[noreturn]] static void FailUndefined(const Value& v, int line);

  // Executes a macro body (used by MacroCallable).
  struct MacroDef {
    const std::vector<MacroParam>* params;
    const Body* body;
    ScopePtr closure;
    std::string name;
  };
  Value CallMacro(const MacroDef& def, CallArgs args, int line);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow ExecBody(const Body& body, const ScopePtr& scope, std::string& out);
  Flow Exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  void ExecFor(const ForStmt& s, const ScopePtr& scope, std::string& out);
  void Assign(const Target& t, Value v, const ScopePtr& scope, int line);
  Value Eval(const Expr& e, const ScopePtr& scope);
  Value EvalBinary(const BinaryExpr& e, const ScopePtr& scope);
  Value EvalCompare(const CompareExpr& e, const ScopePtr& scope);
  Value EvalSlice(const SliceExpr& e, const ScopePtr& scope);
  CallArgs EvalArgs(const CallArgExprs& a, const ScopePtr& scope);
  // Applies a chain of FilterExprs whose innermost operand is null to `input`.
  Value ApplyFilterChain(const Expr& chain, Value input, const ScopePtr& scope);
  void Step(int line);
  void Append(std::string& out, const std::string& s, int line) const;

  RenderLimits limits_;
  std::function<std::time_t()> clock_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
};

// Binary arithmetic with Python semantics (shared with filters such as sum).
Value Arithmetic(BinaryOp op, const Value& a, const Value& b, int line, const Interpreter& interp);

}  // namespace vtllm::jinja
