// GCC 12 reports a false -Wrestrict inside std::string's operator+ when inlined at -O3
// (GCC bug 105329); it must be silenced before <string> is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include "tokenizer/jinja/error.h"

namespace vtllm::jinja {
namespace {

constexpr int kMaxNesting = 128;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  Body ParseTemplate() {
    std::string end;
    Body body = ParseBody({}, &end, 0, "");
    return body;
  }

 private:
  // --- token stream --------------------------------------------------------------------
  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void Next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const { return Cur().type == Token::Type::kOperator && Cur().value == op; }
  bool IsName(std::string_view n) const { return Cur().type == Token::Type::kName && Cur().value == n; }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case Token::Type::kText: return "template text";
      case Token::Type::kVarBegin: return "'{{'";
      case Token::Type::kVarEnd: return "'}}'";
      case Token::Type::kBlockBegin: return "'{%'";
      case Token::Type::kBlockEnd: return "'%}'";
      case Token::Type::kName: return "'" + t.value + "'";
      case Token::Type::kString: return "string literal";
      case Token::Type::kInteger:
      case Token::Type::kFloat: return "number " + t.value;
      case Token::Type::kOperator: return "'" + t.value + "'";
      case Token::Type::kEof: return "end of template";
    }
    return "token";
  }
  [[noreturn]] void Fail(const std::string& msg) const { throw TemplateSyntaxError(Cur().line, msg); }
  void ExpectOp(std::string_view op) {
    if (!IsOp(op)) Fail("expected '" + std::string(op) + "', got " + Describe(Cur()));
    Next();
  }
  std::string ExpectName() {
    if (Cur().type != Token::Type::kName) Fail("expected a name, got " + Describe(Cur()));
    std::string n = Cur().value;
    Next();
    return n;
  }
  void ExpectBlockEnd() {
    if (Cur().type != Token::Type::kBlockEnd) Fail("expected '%}', got " + Describe(Cur()));
    Next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.Fail("template nested too deeply (limit " + std::to_string(kMaxNesting) + ")");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  // --- statements -------------------------------------------------------------------------
  // Parses until `{% <one of end_tags>`; consumes the block begin and the tag name, stores the
  // tag in *end. At top level (no end tags) parses to the end of the template.
  Body ParseBody(std::initializer_list<std::string_view> end_tags, std::string* end, int open_line,
                 std::string_view opener) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = Cur();
      switch (t.type) {
        case Token::Type::kEof:
          if (end_tags.size() == 0) return body;
          throw TemplateSyntaxError(open_line, "'" + std::string(opener) + "' is never closed (expected '" +
                                                   std::string(*end_tags.begin()) + "')");
        case Token::Type::kText:
          body.push_back(std::make_unique<TextStmt>(t.value, t.line));
          Next();
          break;
        case Token::Type::kVarBegin: {
          int line = t.line;
          Next();
          ExprPtr e = ParseTuple(true, {}, false);
          if (Cur().type != Token::Type::kVarEnd) Fail("expected '}}', got " + Describe(Cur()));
          Next();
          body.push_back(std::make_unique<OutputStmt>(std::move(e), line));
          break;
        }
        case Token::Type::kBlockBegin: {
          Next();
          if (Cur().type != Token::Type::kName) Fail("expected a tag name after '{%', got " + Describe(Cur()));
          std::string tag = Cur().value;
          if (std::find(end_tags.begin(), end_tags.end(), tag) != end_tags.end()) {
            *end = tag;
            Next();
            return body;
          }
          body.push_back(ParseStatement());
          break;
        }
        default:
          Fail("unexpected " + Describe(t));
      }
    }
  }

  StmtPtr ParseStatement() {
    const std::string tag = Cur().value;
    int line = Cur().line;
    Next();
    if (tag == "if") return ParseIf(line);
    if (tag == "for") return ParseFor(line);
    if (tag == "set") return ParseSet(line);
    if (tag == "macro") return ParseMacro(line);
    if (tag == "call") return ParseCallBlock(line);
    if (tag == "filter") return ParseFilterBlock(line);
    if (tag == "generation") {
      auto s = std::make_unique<GenerationStmt>(line);
      ExpectBlockEnd();
      std::string end;
      s->body = ParseBody({"endgeneration"}, &end, line, "generation");
      ExpectBlockEnd();
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) throw TemplateSyntaxError(line, "'" + tag + "' outside of a for loop");
      ExpectBlockEnd();
      return std::make_unique<SimpleStmt>(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
    }
    static const char* kUnsupported[] = {"include", "import", "from", "extends", "block", "with",
                                         "autoescape", "do", "trans", "pluralize", "endwith", "debug"};
    for (const char* u : kUnsupported) {
      if (tag == u) throw TemplateUnsupportedError(line, "the '" + tag + "' tag");
    }
    static const char* kEnds[] = {"endif", "endfor", "endset", "endmacro", "endcall", "endfilter",
                                  "endgeneration", "elif", "else", "endraw"};
    for (const char* e : kEnds) {
      if (tag == e) throw TemplateSyntaxError(line, "unexpected '" + tag + "' (no open block it could close)");
    }
    throw TemplateSyntaxError(line, "unknown tag '" + tag + "'");
  }

  StmtPtr ParseIf(int line) {
    auto s = std::make_unique<IfStmt>(line);
    ExprPtr cond = ParseTuple(false, {}, false);
    ExpectBlockEnd();
    while (true) {
      std::string end;
      Body body = ParseBody({"elif", "else", "endif"}, &end, line, "if");
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") {
        cond = ParseTuple(false, {}, false);
        ExpectBlockEnd();
        continue;
      }
      if (end == "else") {
        ExpectBlockEnd();
        s->otherwise = ParseBody({"endif"}, &end, line, "if");
      }
      ExpectBlockEnd();
      return s;
    }
  }

  Target ParseAssignTarget(bool with_namespace, std::initializer_list<std::string_view> end_names) {
    Target t;
    int line = Cur().line;
    if (with_namespace && Cur().type == Token::Type::kName && Peek().type == Token::Type::kOperator &&
        Peek().value == ".") {
      t.names.push_back(ExpectName());
      Next();
      t.attr = ExpectName();
      return t;
    }
    bool paren = IsOp("(");
    if (paren) Next();
    while (true) {
      if (Cur().type != Token::Type::kName) throw TemplateSyntaxError(line, "can't assign to " + Describe(Cur()));
      std::string n = ExpectName();
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None") {
        throw TemplateSyntaxError(line, "can't assign to constant '" + n + "'");
      }
      t.names.push_back(n);
      if (!IsOp(",")) break;
      t.is_tuple = true;
      Next();
      if ((paren && IsOp(")")) || (Cur().type == Token::Type::kName &&
                                   std::find(end_names.begin(), end_names.end(), Cur().value) != end_names.end())) {
        break;
      }
    }
    if (paren) {
      ExpectOp(")");
      t.is_tuple = true;
    }
    return t;
  }

  StmtPtr ParseFor(int line) {
    auto s = std::make_unique<ForStmt>(line);
    s->target = ParseAssignTarget(false, {"in"});
    if (!IsName("in")) Fail("expected 'in' in for loop, got " + Describe(Cur()));
    Next();
    s->iterable = ParseTuple(false, {"recursive", "if"}, false);
    if (IsName("if")) {
      Next();
      s->filter = ParseExpression(true);
    }
    if (IsName("recursive")) throw TemplateUnsupportedError(Cur().line, "recursive for loops");
    ExpectBlockEnd();
    ++loop_depth_;
    std::string end;
    s->body = ParseBody({"endfor", "else"}, &end, line, "for");
    --loop_depth_;
    if (end == "else") {
      ExpectBlockEnd();
      s->otherwise = ParseBody({"endfor"}, &end, line, "for");
    }
    ExpectBlockEnd();
    return s;
  }

  StmtPtr ParseSet(int line) {
    Target target = ParseAssignTarget(true, {});
    if (IsOp("=")) {
      Next();
      auto s = std::make_unique<SetStmt>(line);
      s->target = std::move(target);
      s->value = ParseTuple(true, {}, false);
      ExpectBlockEnd();
      return s;
    }
    if (target.is_tuple) Fail("a block set assigns to a single name");
    auto s = std::make_unique<SetBlockStmt>(line);
    s->target = std::move(target);
    if (IsOp("|")) {
      Next();
      s->filter = ParseFilterChain(nullptr, true);
    }
    ExpectBlockEnd();
    std::string end;
    s->body = ParseBody({"endset"}, &end, line, "set");
    ExpectBlockEnd();
    return s;
  }

  std::vector<MacroParam> ParseParams() {
    std::vector<MacroParam> params;
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!params.empty()) ExpectOp(",");
      if (IsOp(")")) break;
      MacroParam p;
      p.name = ExpectName();
      if (IsOp("=")) {
        Next();
        p.default_value = ParseExpression(true);
      } else if (!params.empty() && params.back().default_value) {
        Fail("non-default argument '" + p.name + "' follows default argument");
      }
      params.push_back(std::move(p));
    }
    Next();
    return params;
  }

  StmtPtr ParseMacro(int line) {
    auto s = std::make_unique<MacroStmt>(line);
    s->name = ExpectName();
    s->params = ParseParams();
    ExpectBlockEnd();
    int saved = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    s->body = ParseBody({"endmacro"}, &end, line, "macro");
    loop_depth_ = saved;
    if (Cur().type == Token::Type::kName) Next();  // {% endmacro name %}
    ExpectBlockEnd();
    return s;
  }

  StmtPtr ParseCallBlock(int line) {
    auto s = std::make_unique<CallBlockStmt>(line);
    if (IsOp("(")) s->params = ParseParams();
    s->call = ParseExpression(true);
    if (s->call->kind != ExprKind::kCall) throw TemplateSyntaxError(line, "expected a call after 'call'");
    ExpectBlockEnd();
    int saved = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    s->body = ParseBody({"endcall"}, &end, line, "call");
    loop_depth_ = saved;
    ExpectBlockEnd();
    return s;
  }

  StmtPtr ParseFilterBlock(int line) {
    auto s = std::make_unique<FilterBlockStmt>(line);
    s->filter = ParseFilterChain(nullptr, true);
    ExpectBlockEnd();
    std::string end;
    s->body = ParseBody({"endfilter"}, &end, line, "filter");
    ExpectBlockEnd();
    return s;
  }

  // --- expressions ------------------------------------------------------------------------
  bool IsTupleEnd(std::initializer_list<std::string_view> extra) const {
    const Token& t = Cur();
    if (t.type == Token::Type::kVarEnd || t.type == Token::Type::kBlockEnd || t.type == Token::Type::kEof) return true;
    if (t.type == Token::Type::kOperator && t.value == ")") return true;
    return t.type == Token::Type::kName && std::find(extra.begin(), extra.end(), t.value) != extra.end();
  }

  ExprPtr ParseTuple(bool with_condexpr, std::initializer_list<std::string_view> extra_end, bool explicit_parens) {
    int line = Cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) ExpectOp(",");
      if (IsTupleEnd(extra_end)) break;
      items.push_back(ParseExpression(with_condexpr));
      if (IsOp(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) Fail("expected an expression, got " + Describe(Cur()));
    }
    auto t = std::make_unique<ListExpr>(true, line);
    t->items = std::move(items);
    return t;
  }

  ExprPtr ParseExpression(bool with_condexpr) {
    DepthGuard guard(*this);
    if (!with_condexpr) return ParseOr();
    ExprPtr e = ParseOr();
    while (IsName("if")) {
      int line = Cur().line;
      Next();
      ExprPtr cond = ParseOr();
      ExprPtr otherwise;
      if (IsName("else")) {
        Next();
        otherwise = ParseExpression(true);
      }
      e = std::make_unique<CondExpr>(std::move(e), std::move(cond), std::move(otherwise), line);
    }
    return e;
  }

  ExprPtr ParseOr() {
    ExprPtr l = ParseAnd();
    while (IsName("or")) {
      int line = Cur().line;
      Next();
      l = std::make_unique<BinaryExpr>(BinaryOp::kOr, std::move(l), ParseAnd(), line);
    }
    return l;
  }

  ExprPtr ParseAnd() {
    ExprPtr l = ParseNot();
    while (IsName("and")) {
      int line = Cur().line;
      Next();
      l = std::make_unique<BinaryExpr>(BinaryOp::kAnd, std::move(l), ParseNot(), line);
    }
    return l;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      DepthGuard guard(*this);
      int line = Cur().line;
      Next();
      return std::make_unique<UnaryExpr>(UnaryOp::kNot, ParseNot(), line);
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    int line = Cur().line;
    ExprPtr first = ParseMath1();
    std::unique_ptr<CompareExpr> cmp;
    while (true) {
      CompareOp op;
      if (Cur().type == Token::Type::kOperator) {
        const std::string& v = Cur().value;
        if (v == "==") op = CompareOp::kEq;
        else if (v == "!=") op = CompareOp::kNe;
        else if (v == "<") op = CompareOp::kLt;
        else if (v == "<=") op = CompareOp::kLe;
        else if (v == ">") op = CompareOp::kGt;
        else if (v == ">=") op = CompareOp::kGe;
        else break;
        Next();
      } else if (IsName("in")) {
        op = CompareOp::kIn;
        Next();
      } else if (IsName("not") && Peek().type == Token::Type::kName && Peek().value == "in") {
        op = CompareOp::kNotIn;
        Next();
        Next();
      } else {
        break;
      }
      if (!cmp) cmp = std::make_unique<CompareExpr>(std::move(first), line);
      cmp->rest.emplace_back(op, ParseMath1());
    }
    if (cmp) return cmp;
    return first;
  }

  ExprPtr ParseMath1() {
    ExprPtr l = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      BinaryOp op = IsOp("+") ? BinaryOp::kAdd : BinaryOp::kSub;
      int line = Cur().line;
      Next();
      l = std::make_unique<BinaryExpr>(op, std::move(l), ParseConcat(), line);
    }
    return l;
  }

  ExprPtr ParseConcat() {
    ExprPtr l = ParseMath2();
    while (IsOp("~")) {
      int line = Cur().line;
      Next();
      l = std::make_unique<BinaryExpr>(BinaryOp::kConcat, std::move(l), ParseMath2(), line);
    }
    return l;
  }

  ExprPtr ParseMath2() {
    ExprPtr l = ParsePow();
    while (true) {
      BinaryOp op;
      if (IsOp("*")) op = BinaryOp::kMul;
      else if (IsOp("/")) op = BinaryOp::kDiv;
      else if (IsOp("//")) op = BinaryOp::kFloorDiv;
      else if (IsOp("%")) op = BinaryOp::kMod;
      else break;
      int line = Cur().line;
      Next();
      l = std::make_unique<BinaryExpr>(op, std::move(l), ParsePow(), line);
    }
    return l;
  }

  ExprPtr ParsePow() {
    ExprPtr l = ParseUnary(true);
    while (IsOp("**")) {
      int line = Cur().line;
      Next();
      l = std::make_unique<BinaryExpr>(BinaryOp::kPow, std::move(l), ParseUnary(true), line);
    }
    return l;
  }

  ExprPtr ParseUnary(bool with_filter) {
    DepthGuard guard(*this);
    int line = Cur().line;
    ExprPtr node;
    if (IsOp("-")) {
      Next();
      node = std::make_unique<UnaryExpr>(UnaryOp::kNeg, ParseUnary(false), line);
    } else if (IsOp("+")) {
      Next();
      node = std::make_unique<UnaryExpr>(UnaryOp::kPos, ParseUnary(false), line);
    } else {
      node = ParsePrimary();
    }
    node = ParsePostfix(std::move(node));
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  ExprPtr ParsePrimary() {
    DepthGuard guard(*this);
    const Token& t = Cur();
    int line = t.line;
    switch (t.type) {
      case Token::Type::kName: {
        std::string n = t.value;
        Next();
        if (n == "true" || n == "True") return std::make_unique<ConstExpr>(Value(true), line);
        if (n == "false" || n == "False") return std::make_unique<ConstExpr>(Value(false), line);
        if (n == "none" || n == "None") return std::make_unique<ConstExpr>(Value::None(), line);
        return std::make_unique<NameExpr>(std::move(n), line);
      }
      case Token::Type::kString: {
        std::string s;
        while (Cur().type == Token::Type::kString) {
          s += Cur().value;
          Next();
        }
        return std::make_unique<ConstExpr>(Value(std::move(s)), line);
      }
      case Token::Type::kInteger: {
        int64_t v = 0;
        auto r = std::from_chars(t.value.data(), t.value.data() + t.value.size(), v);
        if (r.ec != std::errc()) throw TemplateUnsupportedError(line, "integer literal " + t.value + " exceeds 64 bits");
        Next();
        return std::make_unique<ConstExpr>(Value(v), line);
      }
      case Token::Type::kFloat: {
        double v = std::strtod(t.value.c_str(), nullptr);
        Next();
        return std::make_unique<ConstExpr>(Value(v), line);
      }
      case Token::Type::kOperator:
        if (t.value == "(") {
          Next();
          ExprPtr e = ParseTuple(true, {}, true);
          ExpectOp(")");
          return e;
        }
        if (t.value == "[") {
          Next();
          auto l = std::make_unique<ListExpr>(false, line);
          while (!IsOp("]")) {
            if (!l->items.empty()) ExpectOp(",");
            if (IsOp("]")) break;
            l->items.push_back(ParseExpression(true));
          }
          Next();
          return l;
        }
        if (t.value == "{") {
          Next();
          auto d = std::make_unique<DictExpr>(line);
          while (!IsOp("}")) {
            if (!d->items.empty()) ExpectOp(",");
            if (IsOp("}")) break;
            ExprPtr k = ParseExpression(true);
            ExpectOp(":");
            ExprPtr v = ParseExpression(true);
            d->items.emplace_back(std::move(k), std::move(v));
          }
          Next();
          return d;
        }
        break;
      default:
        break;
    }
    Fail("unexpected " + Describe(t) + " in expression");
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    while (true) {
      int line = Cur().line;
      if (IsOp(".")) {
        Next();
        if (Cur().type == Token::Type::kName) {
          node = std::make_unique<GetAttrExpr>(std::move(node), Cur().value, line);
          Next();
        } else if (Cur().type == Token::Type::kInteger) {
          auto key = std::make_unique<ConstExpr>(Value(static_cast<int64_t>(std::stoll(Cur().value))), line);
          Next();
          node = std::make_unique<GetItemExpr>(std::move(node), std::move(key), line);
        } else {
          Fail("expected an attribute name after '.', got " + Describe(Cur()));
        }
      } else if (IsOp("[")) {
        Next();
        node = ParseSubscript(std::move(node), line);
        ExpectOp("]");
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node), line);
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseSubscript(ExprPtr object, int line) {
    ExprPtr start;
    if (!IsOp(":")) {
      start = ParseExpression(true);
      if (IsOp(",")) throw TemplateUnsupportedError(line, "tuple subscripts (obj[a, b])");
      if (!IsOp(":")) return std::make_unique<GetItemExpr>(std::move(object), std::move(start), line);
    }
    Next();  // ':'
    auto s = std::make_unique<SliceExpr>(std::move(object), line);
    s->start = std::move(start);
    if (!IsOp(":") && !IsOp("]")) s->stop = ParseExpression(true);
    if (IsOp(":")) {
      Next();
      if (!IsOp("]")) s->step = ParseExpression(true);
    }
    return s;
  }

  CallArgExprs ParseCallArgs() {
    CallArgExprs args;
    ExpectOp("(");
    bool first = true;
    while (!IsOp(")")) {
      if (!first) {
        ExpectOp(",");
        if (IsOp(")")) break;
      }
      first = false;
      if (IsOp("*") || IsOp("**")) throw TemplateUnsupportedError(Cur().line, "*args/**kwargs in calls");
      if (Cur().type == Token::Type::kName && Peek().type == Token::Type::kOperator && Peek().value == "=") {
        std::string key = ExpectName();
        Next();
        args.kwargs.emplace_back(std::move(key), ParseExpression(true));
      } else {
        if (!args.kwargs.empty()) Fail("positional argument follows keyword argument");
        args.positional.push_back(ParseExpression(true));
      }
    }
    Next();
    return args;
  }

  ExprPtr ParseCall(ExprPtr callee, int line) {
    auto c = std::make_unique<CallExpr>(std::move(callee), line);
    c->args = ParseCallArgs();
    return c;
  }

  std::string ParseDottedName() {
    std::string name = ExpectName();
    while (IsOp(".")) {
      Next();
      name.push_back('.');
      name += ExpectName();
    }
    return name;
  }

  // node | f1(args) | f2 ...; with start_inline the first '|' was already consumed (or is
  // absent, in {% filter f %}).
  ExprPtr ParseFilterChain(ExprPtr node, bool start_inline) {
    while (IsOp("|") || start_inline) {
      if (!start_inline) Next();
      start_inline = false;
      int line = Cur().line;
      auto f = std::make_unique<FilterExpr>(std::move(node), ParseDottedName(), line);
      if (IsOp("(")) f->args = ParseCallArgs();
      node = std::move(f);
    }
    return node;
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        node = ParseFilterChain(std::move(node), false);
      } else if (IsName("is")) {
        node = ParseTest(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node), Cur().line);
      } else {
        return node;
      }
    }
  }

  ExprPtr ParseTest(ExprPtr node) {
    int line = Cur().line;
    Next();  // 'is'
    bool negated = false;
    if (IsName("not")) {
      negated = true;
      Next();
    }
    auto t = std::make_unique<TestExpr>(std::move(node), ParseDottedName(), negated, line);
    const Token& c = Cur();
    if (IsOp("(")) {
      t->args = ParseCallArgs();
    } else if ((c.type == Token::Type::kName || c.type == Token::Type::kString || c.type == Token::Type::kInteger ||
                c.type == Token::Type::kFloat || IsOp("[") || IsOp("{")) &&
               !(IsName("else") || IsName("or") || IsName("and"))) {
      if (IsName("is")) Fail("you cannot chain multiple tests with 'is'");
      ExprPtr arg = ParsePostfix(ParsePrimary());
      t->args.positional.push_back(std::move(arg));
    }
    return t;
  }

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body Parse(const std::vector<Token>& tokens) { return Parser(tokens).ParseTemplate(); }

}  // namespace vtllm::jinja
