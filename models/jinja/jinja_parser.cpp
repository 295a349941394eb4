// Jinja statement parser: tokens -> syntax tree for the tags (for, if, set, macro, with, filter,
// generation, break / continue); unsupported tags, filters and tests fail here, at load time.
#include <set>

#include "models/jinja/jinja_ast.h"

namespace tandem::models::jinja {
namespace {

const std::set<std::string> kUnsupportedTags = {"include", "import", "from",  "extends",    "block",
                                                "call",    "do",     "print", "autoescape", "trans"};

class Parser : public TokenCursor {
 public:
  using TokenCursor::TokenCursor;

  Body parse_all() {
    Body body = parse_body({});
    check_names(body, false);
    return body;
  }

 private:
  // ---- statements ----

  // Parses until a block tag whose name is in `end_tags`; returns with that name as cur().
  Body parse_body(const std::set<std::string>& end_tags) {
    Nest guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TokenKind::kEof) {
        if (end_tags.empty()) return body;
        std::string names;
        for (const auto& n : end_tags) names += (names.empty() ? "'" : " or '") + n + "'";
        fail("unexpected end of template, expected " + names);
      }
      if (t.kind == TokenKind::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.kind == TokenKind::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = t.line;
        next();
        s->expr = parse_tuple(*this, false, true);
        if (cur().kind != TokenKind::kVarEnd) {
          if (cur().kind == TokenKind::kEof) fail("unexpected end of template, the tag is not closed with '}}'");
          fail("expected end of print statement '}}', got " + describe(cur()));
        }
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        next();
        if (cur().kind == TokenKind::kName && end_tags.count(cur().text)) return body;
        body.push_back(parse_statement());
        expect_block_end();
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  StmtPtr stmt(StmtKind kind) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = cur().line;
    return s;
  }

  // After the header of a block statement: '%}', the body, and the end tag's name.
  Body parse_block(const std::set<std::string>& end_tags, bool drop_end) {
    skip_op(":");  // jinja2 takes `{% for x in y: %}`, for Python's sake
    expect_block_end();
    Body body = parse_body(end_tags);
    if (drop_end) next();
    return body;
  }

  StmtPtr parse_statement() {
    if (cur().kind != TokenKind::kName) fail("tag name expected, got " + describe(cur()));
    const std::string tag = cur().text;
    if (tag == "for") return parse_for();
    if (tag == "if") return parse_if();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "with") return parse_with();
    if (tag == "filter") return parse_filter_block();
    if (tag == "generation") {
      // transformers' AssistantTracker renders the body unchanged, as a call block: its own scope.
      auto s = stmt(StmtKind::kScope);
      next();
      const int saved = loop_depth_;
      loop_depth_ = 0;
      s->body = parse_block({"endgeneration"}, true);
      loop_depth_ = saved;
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
      auto s = stmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue);
      next();
      return s;
    }
    if (kUnsupportedTags.count(tag)) fail("unsupported tag '" + tag + "'");
    if (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif")
      fail("unexpected tag '" + tag + "' (no open block it could close)");
    fail("unsupported tag '" + tag + "'");
  }

  StmtPtr parse_for() {
    auto s = stmt(StmtKind::kFor);
    next();
    s->target = parse_assign_target(false);
    if (!skip_name("in")) fail("expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(*this, false, false);
    if (is_name("if")) {
      next();
      s->cond = parse_expression(*this, true);
    }
    if (is_name("recursive")) fail("unsupported: recursive for loops");
    ++loop_depth_;
    s->body = parse_block({"endfor", "else"}, false);
    --loop_depth_;
    if (cur().text == "else") {
      next();
      s->else_body = parse_block({"endfor"}, false);
    }
    next();
    return s;
  }

  StmtPtr parse_if() {
    auto s = stmt(StmtKind::kIf);
    next();
    while (true) {
      s->conds.push_back(parse_tuple(*this, false, false));
      s->bodies.push_back(parse_block({"elif", "else", "endif"}, false));
      const std::string end = cur().text;
      next();
      if (end == "elif") continue;
      if (end == "else") s->bodies.push_back(parse_block({"endif"}, true));
      return s;
    }
  }

  StmtPtr parse_set() {
    auto s = stmt(StmtKind::kSet);
    next();
    s->target = parse_assign_target(true);
    if (skip_op("=")) {
      s->expr = parse_tuple(*this, false, true);
      return s;
    }
    s->kind = StmtKind::kSetBlock;
    s->expr = parse_filter_chain(*this, nullptr, false);
    s->body = parse_block({"endset"}, true);
    return s;
  }

  StmtPtr parse_macro() {
    auto s = stmt(StmtKind::kMacro);
    next();
    s->text = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      s->params.push_back(expect_name());
      if (skip_op("=")) {
        s->defaults.push_back(parse_expression(*this, true));
      } else {
        if (!s->defaults.empty() && s->defaults.back()) fail("non-default argument follows default argument");
        s->defaults.push_back(nullptr);
      }
    }
    next();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_block({"endmacro"}, true);
    loop_depth_ = saved;
    return s;
  }

  StmtPtr parse_with() {
    auto s = stmt(StmtKind::kScope);
    next();
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s->sets.empty()) expect_op(",");
      auto assign = stmt(StmtKind::kSet);
      assign->target = parse_assign_target(false);
      expect_op("=");
      assign->expr = parse_expression(*this, true);
      s->sets.push_back(std::move(assign));
    }
    s->body = parse_block({"endwith"}, true);
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = stmt(StmtKind::kFilterBlock);
    next();
    s->expr = parse_filter_chain(*this, nullptr, true);
    s->body = parse_block({"endfilter"}, true);
    return s;
  }

  // A name, `ns.attr` (set only) or a tuple of names, as jinja2's parse_assign_target.
  ExprPtr parse_assign_target(bool with_namespace) {
    const int line = cur().line;
    if (with_namespace && cur().kind == TokenKind::kName && look().kind == TokenKind::kOp && look().text == ".") {
      auto target = make_expr(ExprKind::kGetAttr, line);
      auto ns = make_expr(ExprKind::kName, line);
      ns->name = expect_name();
      next();
      target->name = expect_name();
      target->kids.push_back(std::move(ns));
      return target;
    }
    ExprPtr target = parse_tuple(*this, true, true);
    check_assignable(*target);
    return target;
  }

  void check_assignable(const Expr& e) {
    if (e.kind == ExprKind::kName) return;
    if (e.kind == ExprKind::kTuple) {
      for (const auto& k : e.kids) check_assignable(*k);
      return;
    }
    fail_at(origin(), e.line, "can't assign to this expression");
  }

  // Unknown filters and tests fail when the template is loaded, except inside an if-statement or
  // an inline if (outside any loop, macro or block nested in it): there jinja2 only fails if the
  // branch runs, and so do we.
  void check_names(const Body& body, bool soft) {
    for (const auto& s : body) {
      switch (s->kind) {
        case StmtKind::kOutput:
        case StmtKind::kSet:
          check_names(*s->expr, soft);
          break;
        case StmtKind::kIf:
          for (const auto& c : s->conds) check_names(*c, true);
          for (const auto& b : s->bodies) check_names(b, true);
          break;
        case StmtKind::kFor:
          check_names(*s->expr, soft);
          if (s->cond) check_names(*s->cond, false);
          check_names(s->body, false);
          check_names(s->else_body, false);
          break;
        case StmtKind::kSetBlock:
        case StmtKind::kFilterBlock:
          if (s->expr) check_names(*s->expr, false);
          check_names(s->body, false);
          break;
        case StmtKind::kMacro:
          for (const auto& d : s->defaults)
            if (d) check_names(*d, false);
          check_names(s->body, false);
          break;
        case StmtKind::kScope:
          for (const auto& set : s->sets) check_names(*set->expr, soft);
          check_names(s->body, false);
          break;
        default:
          break;
      }
    }
  }

  void check_names(const Expr& e, bool soft) {
    if (!soft && e.kind == ExprKind::kFilter && !has_filter(e.name))
      fail_at(origin(), e.line, "unsupported filter '" + e.name + "'");
    if (!soft && e.kind == ExprKind::kTest && !has_test(e.name))
      fail_at(origin(), e.line, "unsupported test '" + e.name + "'");
    const bool inner_soft = soft || e.kind == ExprKind::kCond;
    for (const auto& k : e.kids)
      if (k) check_names(*k, inner_soft);
    for (const auto& kv : e.kwargs) check_names(*kv.second, inner_soft);
  }

  int loop_depth_ = 0;  // `break` and `continue` need a loop around them (a macro body starts over)
};

}  // namespace

std::shared_ptr<const TemplateImpl> parse_template(const std::string& source, const std::string& origin) {
  auto impl = std::make_shared<TemplateImpl>();
  impl->origin = origin;
  impl->body = Parser(lex(source, impl->origin), impl->origin).parse_all();
  return impl;
}

}  // namespace tandem::models::jinja
