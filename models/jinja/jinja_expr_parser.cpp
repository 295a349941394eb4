// Jinja expression parser: jinja2's expression grammar and operator precedence (condexpr, or,
// and, not, comparisons, + -, ~, * / // %, **, unary, postfix, filters and tests).
#include "models/jinja/jinja_ast.h"

namespace tandem::models::jinja {
namespace {

class ExprParser {
 public:
  explicit ExprParser(TokenCursor& c) : c_(c) {}

  // jinja2 (3.1.2) passes its extra end rules ('in' after a for target) in a way that never
  // matches, so `{% for a, in x %}` takes `in` as a second name; we do the same.
  bool is_tuple_end() const {
    const Token& t = cur();
    if (t.kind == TokenKind::kVarEnd || t.kind == TokenKind::kBlockEnd || t.kind == TokenKind::kEof) return true;
    return t.kind == TokenKind::kOp && t.text == ")";
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, bool explicit_parens = false) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end()) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail("expected an expression, got " + describe(cur()));
    }
    auto t = make_expr(ExprKind::kTuple, line);
    t->kids = std::move(items);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    TokenCursor::Nest guard(c_);
    ExprPtr expr1 = parse_or();
    while (is_name("if")) {
      const int line = cur().line;
      next();
      ExprPtr cond = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
      auto e = make_expr(ExprKind::kCond, line);
      e->kids.push_back(std::move(cond));
      e->kids.push_back(std::move(expr1));
      e->kids.push_back(std::move(otherwise));
      expr1 = std::move(e);
    }
    return expr1;
  }

  ExprPtr binary(ExprKind kind, const std::string& op, ExprPtr left, ExprPtr right, int line) {
    auto e = make_expr(kind, line);
    e->name = op;
    e->kids.push_back(std::move(left));
    e->kids.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      next();
      left = binary(ExprKind::kOr, "or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      next();
      left = binary(ExprKind::kAnd, "and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      TokenCursor::Nest guard(c_);
      auto e = make_expr(ExprKind::kUnary, cur().line);
      e->name = "not";
      next();
      e->kids.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    auto e = make_expr(ExprKind::kCompare, line);
    e->kids.push_back(std::move(first));
    while (true) {
      if (cur().kind == TokenKind::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                           cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        e->ops.push_back(cur().text);
        next();
      } else if (is_name("in")) {
        e->ops.push_back("in");
        next();
      } else if (is_name("not") && look().kind == TokenKind::kName && look().text == "in") {
        e->ops.push_back("not in");
        next();
        next();
      } else {
        break;
      }
      e->kids.push_back(parse_math1());
    }
    if (e->ops.empty()) return std::move(e->kids[0]);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().text;
      const int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, "~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().text;
      const int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      next();
      left = binary(ExprKind::kBinary, "**", std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    TokenCursor::Nest guard(c_);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make_expr(ExprKind::kUnary, cur().line);
      e->name = cur().text;
      next();
      e->kids.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    TokenCursor::Nest guard(c_);
    const Token& t = cur();
    const int line = t.line;
    if (t.kind == TokenKind::kName) {
      auto e = make_expr(ExprKind::kLiteral, line);
      if (t.text == "true" || t.text == "True") {
        e->value = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.text;
      }
      next();
      return e;
    }
    if (t.kind == TokenKind::kString) {
      std::string s;
      while (cur().kind == TokenKind::kString) {  // adjacent literals concatenate, as in Python
        s += cur().text;
        next();
      }
      auto e = make_expr(ExprKind::kLiteral, line);
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.kind == TokenKind::kInt || t.kind == TokenKind::kFloat) {
      auto e = make_expr(ExprKind::kLiteral, line);
      e->value = t.kind == TokenKind::kInt ? Value::integer(t.int_value) : Value::number(t.float_value);
      next();
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(false, true, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = make_expr(ExprKind::kList, line);
      while (!is_op("]")) {
        if (!e->kids.empty()) expect_op(",");
        if (is_op("]")) break;
        e->kids.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      next();
      auto e = make_expr(ExprKind::kDict, line);
      while (!is_op("}")) {
        if (!e->kids.empty()) expect_op(",");
        if (is_op("}")) break;
        e->kids.push_back(parse_expression(true));
        expect_op(":");
        e->kids.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    if (t.kind == TokenKind::kEof) fail("unexpected end of template inside an expression");
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter_chain(std::move(e), false);
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr subject) {
    const int line = cur().line;
    if (skip_op(".")) {
      if (cur().kind == TokenKind::kName) {
        auto e = make_expr(ExprKind::kGetAttr, line);
        e->name = cur().text;
        e->kids.push_back(std::move(subject));
        next();
        return e;
      }
      if (cur().kind != TokenKind::kInt) fail("expected a name or number after '.', got " + describe(cur()));
      auto e = make_expr(ExprKind::kGetItem, line);
      auto index = make_expr(ExprKind::kLiteral, line);
      index->value = Value::integer(cur().int_value);
      next();
      e->kids.push_back(std::move(subject));
      e->kids.push_back(std::move(index));
      return e;
    }
    next();  // '['
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = make_expr(ExprKind::kGetItem, line);
    e->kids.push_back(std::move(subject));
    if (args.size() == 1) {
      e->kids.push_back(std::move(args[0]));
    } else {
      auto t = make_expr(ExprKind::kTuple, line);
      t->kids = std::move(args);
      e->kids.push_back(std::move(t));
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    const int line = cur().line;
    std::vector<ExprPtr> parts;
    if (is_op(":")) {
      next();
      parts.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      parts.push_back(std::move(e));
    }
    auto slice_end = [&] { return is_op("]") || is_op(","); };
    if (is_op(":")) {
      parts.push_back(nullptr);
    } else {
      parts.push_back(slice_end() ? nullptr : parse_expression(true));
    }
    if (skip_op(":")) {
      parts.push_back(slice_end() ? nullptr : parse_expression(true));
    } else {
      parts.push_back(nullptr);
    }
    auto s = make_expr(ExprKind::kSlice, line);
    s->kids = std::move(parts);
    return s;
  }

  // '(' args ')' onto `e`, which is the callee, a filter or a test.
  void parse_call_args(Expr* e) {
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail("unsupported: *args / **kwargs in calls");
      if (cur().kind == TokenKind::kName && look().kind == TokenKind::kOp && look().text == "=") {
        std::string key = cur().text;
        next();
        next();
        e->kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e->kwargs.empty()) fail("positional argument follows keyword argument");
        e->kids.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make_expr(ExprKind::kCall, cur().line);
    e->kids.push_back(std::move(callee));
    parse_call_args(e.get());
    return e;
  }

  // `| name(args) | name ...`; with `start_inline` the first '|' is implied ({% filter %}).
  ExprPtr parse_filter_chain(ExprPtr subject, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      const int line = cur().line;
      std::string name = expect_name();
      while (skip_op(".")) name += "." + expect_name();
      auto e = make_expr(ExprKind::kFilter, line);
      e->name = name;
      e->kids.push_back(std::move(subject));
      if (is_op("(")) parse_call_args(e.get());
      subject = std::move(e);
    }
    return subject;
  }

  ExprPtr parse_test(ExprPtr subject) {
    auto e = make_expr(ExprKind::kTest, cur().line);
    next();  // 'is'
    if (skip_name("not")) e->negated = true;
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    e->name = name;
    e->kids.push_back(std::move(subject));
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(e.get());
    } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString || t.kind == TokenKind::kInt ||
                t.kind == TokenKind::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
      e->kids.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

 private:
  const Token& cur() const { return c_.cur(); }
  const Token& look() const { return c_.look(); }
  void next() { c_.next(); }
  bool is_op(const char* op) const { return c_.is_op(op); }
  bool is_name(const char* name) const { return c_.is_name(name); }
  bool skip_op(const char* op) { return c_.skip_op(op); }
  bool skip_name(const char* name) { return c_.skip_name(name); }
  void expect_op(const char* op) { c_.expect_op(op); }
  std::string expect_name() { return c_.expect_name(); }
  [[noreturn]] void fail(const std::string& message) const { c_.fail(message); }
  static std::string describe(const Token& t) { return TokenCursor::describe(t); }

  TokenCursor& c_;
};

}  // namespace

ExprPtr make_expr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

ExprPtr parse_expression(TokenCursor& c, bool with_condexpr) { return ExprParser(c).parse_expression(with_condexpr); }

ExprPtr parse_tuple(TokenCursor& c, bool simplified, bool with_condexpr, bool explicit_parens) {
  return ExprParser(c).parse_tuple(simplified, with_condexpr, explicit_parens);
}

ExprPtr parse_filter_chain(TokenCursor& c, ExprPtr subject, bool start_inline) {
  return ExprParser(c).parse_filter_chain(std::move(subject), start_inline);
}

}  // namespace tandem::models::jinja
