// Internal to the Jinja interpreter: tokens, the syntax tree, and the entry points its parts share
// (lexer, statement and expression parsers, evaluator, operators, builtins, attribute access).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/jinja/jinja.h"
#include "models/jinja/jinja_pystr.h"
#include "models/jinja/jinja_value.h"

namespace tandem::models::jinja {

// "<origin>:<line>: <message>" as a tandem::UserError.
[[noreturn]] void fail_at(const std::string& origin, int line, const std::string& message);

enum class TokenKind { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  TokenKind kind;
  std::string text;  // data, name, operator, or a string literal's decoded value
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0.0;
};

// jinja2's Lexer with trim_blocks and lstrip_blocks on and keep_trailing_newline off. Comments
// are dropped and raw blocks come back as data.
std::vector<Token> lex(const std::string& source, const std::string& origin);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,  // value
  kName,     // name
  kGetAttr,  // kids[0].name
  kGetItem,  // kids[0][kids[1]]
  kSlice,    // kids[0..2] = start, stop, step; each may be null
  kCall,     // kids[0](kids[1..], kwargs)
  kFilter,   // kids[0] | name(kids[1..], kwargs); kids[0] is null inside a filter block
  kTest,     // kids[0] is [not] name(kids[1..], kwargs)
  kUnary,    // name in {"-", "+", "not"}
  kBinary,   // name in {"+", "-", "*", "/", "//", "%", "**", "~"}
  kAnd,
  kOr,
  kCompare,  // kids[0] ops[0] kids[1] ops[1] kids[2] ...
  kCond,     // kids[1] if kids[0] else kids[2] (kids[2] may be null: Undefined)
  kList,
  kTuple,
  kDict,  // kids = k0, v0, k1, v1, ...
};

struct Expr {
  ExprKind kind;
  int line = 1;
  Value value;
  std::string name;
  std::vector<ExprPtr> kids;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,      // text
  kOutput,    // {{ expr }}
  kIf,        // conds[i] -> bodies[i]; bodies.back() is the else branch when bodies > conds
  kFor,       // for target in expr [if cond] body [else else_body]
  kSet,       // set target = expr
  kSetBlock,  // set target [| filters] body endset: filter is a kFilter chain over null
  kMacro,     // macro name(params = defaults) body
  kBreak,
  kContinue,
  kScope,  // a body in its own scope: {% generation %}, {% with %} (assignments in `sets`)
  kFilterBlock,
};

struct Stmt {
  StmtKind kind;
  int line = 1;
  std::string text;
  ExprPtr target;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param, null when the param has none
  std::vector<StmtPtr> sets;      // {% with a = 1 %}: evaluated in the new scope
};

// The parser's position in the token list, shared by the statement parser (jinja_parser.cpp) and
// the expression parser (jinja_expr_parser.cpp).
class TokenCursor {
 public:
  TokenCursor(std::vector<Token> tokens, const std::string& origin) : toks_(std::move(tokens)), origin_(origin) {}

  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().kind == TokenKind::kOp && cur().text == op; }
  bool is_name(const char* name) const { return cur().kind == TokenKind::kName && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail(const std::string& message) const { fail_at(origin_, cur().line, message); }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kData:
        return "template data";
      case TokenKind::kVarBegin:
        return "'{{'";
      case TokenKind::kVarEnd:
        return "'}}'";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kEof:
        return "end of template";
      case TokenKind::kString:
        return "string literal";
      default:
        return "'" + t.text + "'";
    }
  }

  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::kName) fail("expected a name, got " + describe(cur()));
    std::string name = cur().text;
    next();
    return name;
  }
  void expect_block_end() {
    if (cur().kind == TokenKind::kEof) fail("unexpected end of template, the tag is not closed with '%}'");
    if (cur().kind != TokenKind::kBlockEnd) fail("expected end of statement '%}', got " + describe(cur()));
    next();
  }

  const std::string& origin() const { return origin_; }

  // Bounds the parser's recursion: Python stops at its recursion limit, and the C++ stack must
  // not overflow on "((((...".
  class Nest {
   public:
    explicit Nest(TokenCursor& c) : c_(c) {
      if (++c_.depth_ > kMaxNesting) c_.fail("template nested too deeply");
    }
    ~Nest() { --c_.depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    TokenCursor& c_;
  };

 private:
  static constexpr int kMaxNesting = 200;
  std::vector<Token> toks_;
  const std::string& origin_;
  size_t pos_ = 0;
  int depth_ = 0;
};

ExprPtr make_expr(ExprKind kind, int line);
// jinja2's parse_expression / parse_tuple / parse_filter (jinja_expr_parser.cpp). `simplified`
// tuples hold only primaries (assignment targets); `explicit_parens` allows "()".
ExprPtr parse_expression(TokenCursor& c, bool with_condexpr);
ExprPtr parse_tuple(TokenCursor& c, bool simplified, bool with_condexpr, bool explicit_parens = false);
// `| name(args) | ...` onto `subject`; with `start_inline` the first '|' is implied ({% filter %}).
ExprPtr parse_filter_chain(TokenCursor& c, ExprPtr subject, bool start_inline);

struct TemplateImpl {
  std::string origin;
  Body body;
};

std::shared_ptr<const TemplateImpl> parse_template(const std::string& source, const std::string& origin);

// Filters and tests (jinja_builtins.cpp). The parser asks whether one exists, so that an
// unsupported one fails when the template is loaded rather than on the render that reaches it.
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& subject, Args& args);
bool apply_test(const std::string& name, const Value& subject, Args& args);
// Attribute access, calls and globals (jinja_methods.cpp).
Value get_attr(const Value& obj, const std::string& name);      // the sandbox's getattr: obj.name
Value get_item(const Value& obj, const Value& key);             // the sandbox's getitem: obj[key]
Value get_own_attr(const Value& obj, const std::string& name);  // Python's getattr alone (the attr filter)
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
Value call(const Value& fn, Args& args);
// Python's binary operators (jinja_ops.cpp): op is one of + - * / // % ** ~.
Value binary_op(const std::string& op, const Value& a, const Value& b);
[[noreturn]] void fail_undefined(const Value& v);  // using an Undefined as an object: jinja2's UndefinedError
Value lookup_global(const std::string& name);      // Undefined when there is no such global

}  // namespace tandem::models::jinja
