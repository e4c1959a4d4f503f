// Syntax tree of a parsed template. Expressions and statements are small structs tagged with
// a kind; the interpreter switches on the kind. Every node records its template line.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace vtllm::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kConst, kName, kList, kDict, kGetAttr, kGetItem, kSlice, kCall, kFilter, kTest,
  kUnary, kBinary, kCompare, kCondExpr,
};

struct Expr {
  Expr(ExprKind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
  ExprKind kind;
  int line;
};

struct ConstExpr : Expr {
  ConstExpr(Value v, int l) : Expr(ExprKind::kConst, l), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(std::string n, int l) : Expr(ExprKind::kName, l), name(std::move(n)) {}
  std::string name;
};

struct ListExpr : Expr {
  ListExpr(bool tuple, int l) : Expr(ExprKind::kList, l), is_tuple(tuple) {}
  std::vector<ExprPtr> items;
  bool is_tuple;
};

struct DictExpr : Expr {
  explicit DictExpr(int l) : Expr(ExprKind::kDict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

// obj.attr (attribute first, then item, as Jinja's getattr).
struct GetAttrExpr : Expr {
  GetAttrExpr(ExprPtr o, std::string a, int l) : Expr(ExprKind::kGetAttr, l), object(std::move(o)), attr(std::move(a)) {}
  ExprPtr object;
  std::string attr;
};

// obj[key] (item first, then attribute, as Jinja's getitem).
struct GetItemExpr : Expr {
  GetItemExpr(ExprPtr o, ExprPtr k, int l) : Expr(ExprKind::kGetItem, l), object(std::move(o)), key(std::move(k)) {}
  ExprPtr object;
  ExprPtr key;
};

// obj[start:stop:step]; absent parts are null.
struct SliceExpr : Expr {
  SliceExpr(ExprPtr o, int l) : Expr(ExprKind::kSlice, l), object(std::move(o)) {}
  ExprPtr object, start, stop, step;
};

struct CallArgExprs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct CallExpr : Expr {
  CallExpr(ExprPtr c, int l) : Expr(ExprKind::kCall, l), callee(std::move(c)) {}
  ExprPtr callee;
  CallArgExprs args;
};

// operand | name(args). The operand is null in a filter block/block set chain, where the
// captured body is the operand.
struct FilterExpr : Expr {
  FilterExpr(ExprPtr o, std::string n, int l) : Expr(ExprKind::kFilter, l), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  CallArgExprs args;
};

// operand is [not] name(args)
struct TestExpr : Expr {
  TestExpr(ExprPtr o, std::string n, bool neg, int l)
      : Expr(ExprKind::kTest, l), operand(std::move(o)), name(std::move(n)), negated(neg) {}
  ExprPtr operand;
  std::string name;
  bool negated;
  CallArgExprs args;
};

enum class UnaryOp { kNot, kNeg, kPos };
struct UnaryExpr : Expr {
  UnaryExpr(UnaryOp o, ExprPtr e, int l) : Expr(ExprKind::kUnary, l), op(o), operand(std::move(e)) {}
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat, kAnd, kOr };
struct BinaryExpr : Expr {
  BinaryExpr(BinaryOp o, ExprPtr a, ExprPtr b, int l)
      : Expr(ExprKind::kBinary, l), op(o), lhs(std::move(a)), rhs(std::move(b)) {}
  BinaryOp op;
  ExprPtr lhs, rhs;
};

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };
// first op1 x1 op2 x2 ... (chained like Python).
struct CompareExpr : Expr {
  CompareExpr(ExprPtr f, int l) : Expr(ExprKind::kCompare, l), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

// then if cond else otherwise (otherwise may be null: Undefined).
struct CondExpr : Expr {
  CondExpr(ExprPtr t, ExprPtr c, ExprPtr e, int l)
      : Expr(ExprKind::kCondExpr, l), then(std::move(t)), cond(std::move(c)), otherwise(std::move(e)) {}
  ExprPtr then, cond, otherwise;
};

enum class StmtKind {
  kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kBreak, kContinue,
  kGeneration,
};

struct Stmt {
  Stmt(StmtKind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  int line;
};

struct TextStmt : Stmt {
  TextStmt(std::string t, int l) : Stmt(StmtKind::kText, l), text(std::move(t)) {}
  std::string text;
};

struct OutputStmt : Stmt {
  OutputStmt(ExprPtr e, int l) : Stmt(StmtKind::kOutput, l), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(int l) : Stmt(StmtKind::kIf, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if + elifs
  Body otherwise;
};

// Assignment target: one name, a tuple of names, or namespace attribute (ns.attr).
struct Target {
  std::vector<std::string> names;
  bool is_tuple = false;
  std::string attr;  // non-empty for `ns.attr`; names[0] is the namespace
};

struct ForStmt : Stmt {
  explicit ForStmt(int l) : Stmt(StmtKind::kFor, l) {}
  Target target;
  ExprPtr iterable;
  ExprPtr filter;  // `for x in xs if cond`; may be null
  Body body;
  Body otherwise;
};

struct SetStmt : Stmt {
  explicit SetStmt(int l) : Stmt(StmtKind::kSet, l) {}
  Target target;
  ExprPtr value;
};

// {% set name | filters %}body{% endset %}
struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(int l) : Stmt(StmtKind::kSetBlock, l) {}
  Target target;
  ExprPtr filter;  // FilterExpr chain whose innermost operand is null; may be null
  Body body;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct MacroStmt : Stmt {
  explicit MacroStmt(int l) : Stmt(StmtKind::kMacro, l) {}
  std::string name;
  std::vector<MacroParam> params;
  Body body;
};

// {% call(params) macro(args) %}body{% endcall %}
struct CallBlockStmt : Stmt {
  explicit CallBlockStmt(int l) : Stmt(StmtKind::kCallBlock, l) {}
  std::vector<MacroParam> params;
  ExprPtr call;
  Body body;
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(int l) : Stmt(StmtKind::kFilterBlock, l) {}
  ExprPtr filter;  // FilterExpr chain whose innermost operand is null
  Body body;
};

struct SimpleStmt : Stmt {
  SimpleStmt(StmtKind k, int l) : Stmt(k, l) {}
};

// transformers' {% generation %} tag: renders its body (marks assistant text for masks).
struct GenerationStmt : Stmt {
  explicit GenerationStmt(int l) : Stmt(StmtKind::kGeneration, l) {}
  Body body;
};

}  // namespace vtllm::jinja
