// Jinja evaluator: walks the syntax tree with jinja2's scoping (a for-loop iteration and a macro
// call are scopes; if-blocks are not), Python's operators, and output assembled as jinja2 does.
#include <algorithm>
#include <cmath>
#include <optional>

#include "common/error.h"
#include "models/jinja/jinja_ast.h"

namespace tandem::models::jinja {

namespace {

// Macro calls nest no deeper than this; Python would stop at its own recursion limit.
constexpr int kMaxCallDepth = 200;

struct Scope;
using ScopePtr = std::shared_ptr<Scope>;

struct Scope {
  ScopePtr parent;
  std::vector<std::pair<std::string, Value>> vars;
  bool iteration_over = false;  // a for-loop iteration scope whose iteration has finished

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get())
      for (const auto& [k, v] : s->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value value) {
    for (auto& [k, v] : vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(name, std::move(value));
  }
};

ScopePtr child_of(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

template <class Json>
Value from_json(const Json& j) {
  switch (j.type()) {
    case Json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Value::number(static_cast<double>(u))
                                                  : Value::integer(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value::number(j.template get<double>());
    case Json::value_t::string:
      return Value::string(j.template get<std::string>());
    case Json::value_t::array: {
      ValueList items;
      for (const auto& x : j) items.push_back(from_json(x));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it)
        d.entries.emplace_back(Value::string(it.key()), from_json(it.value()));
      return Value::dict(std::move(d));
    }
    default:
      return Value::none();
  }
}

// Whether jinja2's optimizer folds `e` to a constant when compiling (literals and what is built
// from them; not names, calls, or filters that need the render context).
bool is_constant(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return true;
    case ExprKind::kName:
    case ExprKind::kCall:
      return false;
    case ExprKind::kFilter:
      if (!e.kids[0] || e.name == "map" || e.name == "select" || e.name == "reject" || e.name == "selectattr" ||
          e.name == "rejectattr")
        return false;
      break;
    default:
      break;
  }
  for (const auto& k : e.kids)
    if (k && !is_constant(*k)) return false;
  for (const auto& kv : e.kwargs)
    if (!is_constant(*kv.second)) return false;
  return true;
}

class Interp {
 public:
  explicit Interp(const TemplateImpl& t) : t_(t) {}
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;

  // No value outlives the render, so reference cycles (which Python's GC would collect) are cut
  // here: a namespace that holds itself, directly or through a bound method.
  ~Interp() {
    for (const Value& ns : namespaces_) ns.ns_ref().entries.clear();
  }

  std::string render(Value context) {
    auto root = std::make_shared<Scope>();
    for (auto& [k, v] : context.dict_ref().entries) root->set(k.str(), v);
    std::string out;
    exec_body(t_.body, root, out);
    return out;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  [[noreturn]] void fail(int line, const std::string& message) const { fail_at(t_.origin, line, message); }

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const auto& s : body) {
      const Flow f = exec(*s, scope, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
    try {
      return exec_unchecked(s, scope, out);
    } catch (const JinjaError& e) {
      fail(s.line, e.what());
    }
  }

  Flow exec_unchecked(const Stmt& s, const ScopePtr& scope, std::string& out) {
    switch (s.kind) {
      case StmtKind::kText:
        out += s.text;
        return Flow::kNormal;
      case StmtKind::kOutput:
        out += to_str(eval(*s.expr, scope));
        return Flow::kNormal;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conds.size(); ++i)
          if (truthy(eval(*s.conds[i], scope))) return exec_body(s.bodies[i], scope, out);
        return s.bodies.size() > s.conds.size() ? exec_body(s.bodies.back(), scope, out) : Flow::kNormal;
      case StmtKind::kFor:
        return exec_for(s, scope, out);
      case StmtKind::kSet:
        assign(*s.target, eval(*s.expr, scope), scope);
        return Flow::kNormal;
      case StmtKind::kSetBlock: {
        std::string captured;
        const Flow f = exec_body(s.body, scope, captured);
        if (f != Flow::kNormal) return f;
        assign(*s.target, apply_chain(s.expr.get(), Value::string(std::move(captured)), scope), scope);
        return Flow::kNormal;
      }
      case StmtKind::kMacro:
        scope->set(s.text, make_macro(s, scope));
        return Flow::kNormal;
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope: {
        ScopePtr inner = child_of(scope);
        for (const auto& set : s.sets) assign(*set->target, eval(*set->expr, scope), inner);
        return exec_body(s.body, inner, out);
      }
      case StmtKind::kFilterBlock: {
        std::string captured;
        const Flow f = exec_body(s.body, scope, captured);
        out += to_str(apply_chain(s.expr.get(), Value::string(std::move(captured)), scope));
        return f;
      }
    }
    return Flow::kNormal;
  }

  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    ValueList items = iterate(eval(*s.expr, scope));
    if (s.cond) {
      ValueList kept;
      for (auto& item : items) {
        ScopePtr probe = child_of(scope);
        assign(*s.target, item, probe);
        if (truthy(eval(*s.cond, probe))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      ScopePtr inner = child_of(scope);
      return exec_body(s.else_body, inner, out);
    }
    const auto n = static_cast<int64_t>(items.size());
    auto index = std::make_shared<int64_t>(0);
    const Value cycle = Value::callable("cycle", [index](Args& args) {
      if (args.pos.empty()) throw JinjaError("no items for cycling given");
      return args.pos[*index % args.pos.size()];
    });
    auto last_seen = std::make_shared<std::optional<ValueList>>();
    const Value changed = Value::callable("changed", [last_seen](Args& args) {
      if (*last_seen && last_seen->value().size() == args.pos.size() &&
          equals(Value::list(last_seen->value()), Value::list(args.pos)))
        return Value::boolean(false);
      *last_seen = args.pos;
      return Value::boolean(true);
    });
    for (int64_t i = 0; i < n; ++i) {
      *index = i;
      ScopePtr inner = child_of(scope);
      assign(*s.target, items[i], inner);
      Dict loop;
      auto put = [&](const char* key, Value v) { loop.entries.emplace_back(Value::string(key), std::move(v)); };
      put("index", Value::integer(i + 1));
      put("index0", Value::integer(i));
      put("revindex", Value::integer(n - i));
      put("revindex0", Value::integer(n - i - 1));
      put("first", Value::boolean(i == 0));
      put("last", Value::boolean(i == n - 1));
      put("length", Value::integer(n));
      put("depth", Value::integer(1));
      put("depth0", Value::integer(0));
      if (i > 0) put("previtem", items[i - 1]);
      if (i + 1 < n) put("nextitem", items[i + 1]);
      put("cycle", cycle);
      put("changed", changed);
      inner->set("loop", Value::dict(std::move(loop)));
      const Flow flow = exec_body(s.body, inner, out);
      inner->iteration_over = true;
      if (flow == Flow::kBreak) break;
    }
    last_seen->reset();  // it may hold the loop object, which holds it: a cycle
    return Flow::kNormal;
  }

  void assign(const Expr& target, const Value& value, const ScopePtr& scope) {
    if (target.kind == ExprKind::kName) {
      scope->set(target.name, value);
    } else if (target.kind == ExprKind::kTuple) {
      const ValueList parts = iterate(value);
      if (parts.size() != target.kids.size())
        throw JinjaError(parts.size() > target.kids.size()
                             ? "too many values to unpack (expected " + std::to_string(target.kids.size()) + ")"
                             : "not enough values to unpack (expected " + std::to_string(target.kids.size()) +
                                   ", got " + std::to_string(parts.size()) + ")");
      for (size_t i = 0; i < parts.size(); ++i) assign(*target.kids[i], parts[i], scope);
    } else {  // ns.attr
      const std::string& ns_name = target.kids[0]->name;
      const Value* ns = scope->find(ns_name);
      if (!ns || ns->kind() != Value::Kind::kNamespace)
        throw JinjaError("cannot assign attribute on non-namespace object ('" + ns_name + "')");
      ns->ns_ref().set(Value::string(target.name), value);
      if (std::none_of(namespaces_.begin(), namespaces_.end(),
                       [&](const Value& v) { return v.identity() == ns->identity(); }))
        namespaces_.push_back(*ns);
    }
  }

  // A filter chain from {% set x | f %} or {% filter f %}: its innermost subject is null.
  Value apply_chain(const Expr* chain, Value input, const ScopePtr& scope) {
    if (!chain) return input;
    Value subject = apply_chain(chain->kids[0].get(), std::move(input), scope);
    Args args = eval_args(*chain, 1, scope);
    return apply_filter(chain->name, subject, args);
  }

  // The macro refers to the scope it was defined in without owning it (the scope holds the macro:
  // owning would be a cycle); the interpreter keeps that scope alive until the render ends.
  Value make_macro(const Stmt& s, const ScopePtr& defined_in) {
    const Stmt* macro = &s;
    Interp* self = this;
    macro_scopes_.push_back(defined_in);
    const std::weak_ptr<Scope> weak_scope = defined_in;
    return Value::callable(s.text, [self, macro, weak_scope](Args& args) {
      const ScopePtr defined_in = weak_scope.lock();
      if (!defined_in) throw JinjaError("macro '" + macro->text + "' called after its template finished rendering");
      // jinja2 resets a finished loop's variables to an internal `missing` that such a macro
      // would then print; we do not imitate that.
      for (const Scope* s = defined_in.get(); s; s = s->parent.get())
        if (s->iteration_over)
          throw JinjaError("unsupported: calling macro '" + macro->text +
                           "' after the loop iteration it was defined in");
      const size_t n = macro->params.size();
      if (args.pos.size() > n)
        throw JinjaError("macro '" + macro->text + "' takes not more than " + std::to_string(n) + " argument(s)");
      ScopePtr scope = child_of(defined_in);
      std::vector<bool> bound(n, false);
      for (size_t i = 0; i < args.pos.size(); ++i) scope->set(macro->params[i], args.pos[i]), bound[i] = true;
      for (auto& [key, value] : args.kw) {
        size_t i = 0;
        while (i < n && macro->params[i] != key) ++i;
        if (i == n) throw JinjaError("macro '" + macro->text + "' takes no keyword argument '" + key + "'");
        if (bound[i]) throw JinjaError("macro '" + macro->text + "' got multiple values for argument '" + key + "'");
        scope->set(key, value);
        bound[i] = true;
      }
      for (size_t i = 0; i < n; ++i) {
        if (bound[i]) continue;
        scope->set(macro->params[i], macro->defaults[i]
                                         ? self->eval(*macro->defaults[i], scope)
                                         : Value::undefined("parameter '" + macro->params[i] + "' was not provided"));
      }
      struct DepthGuard {
        int& depth;
        ~DepthGuard() { --depth; }
      } guard{++self->call_depth_};
      if (self->call_depth_ > kMaxCallDepth)
        throw JinjaError("maximum recursion depth exceeded in macro '" + macro->text + "'");
      std::string out;
      self->exec_body(macro->body, scope, out);
      return Value::string(std::move(out));
    });
  }

  Args eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
    Args args;
    for (size_t i = first; i < e.kids.size(); ++i) args.pos.push_back(eval(*e.kids[i], scope));
    for (const auto& [k, v] : e.kwargs) args.kw.emplace_back(k, eval(*v, scope));
    return args;
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    try {
      return eval_unchecked(e, scope);
    } catch (const JinjaError& err) {
      fail(e.line, err.what());
    }
  }

  Value eval_unchecked(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.value;
      case ExprKind::kName: {
        if (const Value* v = scope->find(e.name)) return *v;
        return lookup_global(e.name);
      }
      case ExprKind::kGetAttr:
        return get_attr(eval(*e.kids[0], scope), e.name);
      case ExprKind::kGetItem: {
        const Value obj = eval(*e.kids[0], scope);
        const Expr& key = *e.kids[1];
        if (key.kind != ExprKind::kSlice) return get_item(obj, eval(key, scope));
        auto part = [&](size_t i) { return key.kids[i] ? eval(*key.kids[i], scope) : Value::none(); };
        return slice(obj, part(0), part(1), part(2));
      }
      case ExprKind::kSlice:
        throw JinjaError("a slice is only allowed inside []");
      case ExprKind::kCall: {
        const Value fn = eval(*e.kids[0], scope);
        Args args = eval_args(e, 1, scope);
        return call(fn, args);
      }
      case ExprKind::kFilter: {
        const Value subject = eval(*e.kids[0], scope);
        Args args = eval_args(e, 1, scope);
        return apply_filter(e.name, subject, args);
      }
      case ExprKind::kTest: {
        const Value subject = eval(*e.kids[0], scope);
        Args args = eval_args(e, 1, scope);
        return Value::boolean(apply_test(e.name, subject, args) != e.negated);
      }
      case ExprKind::kUnary: {
        const Value v = eval(*e.kids[0], scope);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) throw JinjaError("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
        if (e.name == "+") return v.kind() == Value::Kind::kFloat ? v : Value::integer(v.as_int());
        if (v.kind() == Value::Kind::kFloat) return Value::number(-v.as_double());
        return binary_op("-", Value::integer(0), v);
      }
      case ExprKind::kBinary: {
        const Value a = eval(*e.kids[0], scope);
        const Value b = eval(*e.kids[1], scope);
        // jinja2 folds a constant left operand such as `-3` and writes it unparenthesized into the
        // Python it compiles to, so `-3 ** x` is -(3 ** x) there; the same holds here.
        if (e.name == "**" && a.is_number() && (a.as_double() < 0 || std::signbit(a.as_double())) &&
            is_constant(*e.kids[0]) && !is_constant(*e.kids[1])) {
          const Value zero = Value::integer(0);
          return binary_op("-", zero, binary_op("**", binary_op("-", zero, a), b));
        }
        return binary_op(e.name, a, b);
      }
      case ExprKind::kAnd: {
        Value a = eval(*e.kids[0], scope);
        return truthy(a) ? eval(*e.kids[1], scope) : a;
      }
      case ExprKind::kOr: {
        Value a = eval(*e.kids[0], scope);
        return truthy(a) ? a : eval(*e.kids[1], scope);
      }
      case ExprKind::kCompare:
        return Value::boolean(eval_compare(e, scope));
      case ExprKind::kCond:
        if (truthy(eval(*e.kids[0], scope))) return eval(*e.kids[1], scope);
        if (e.kids[2]) return eval(*e.kids[2], scope);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
      case ExprKind::kList:
      case ExprKind::kTuple: {
        ValueList items;
        for (const auto& k : e.kids) items.push_back(eval(*k, scope));
        return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case ExprKind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
          Value key = eval(*e.kids[i], scope);
          if (key.kind() == Value::Kind::kList || key.kind() == Value::Kind::kDict || key.is_undefined())
            throw JinjaError("unhashable type: '" + type_name(key) + "'");
          d.set(std::move(key), eval(*e.kids[i + 1], scope));
        }
        return Value::dict(std::move(d));
      }
    }
    throw JinjaError("unknown expression");
  }

  bool eval_compare(const Expr& e, const ScopePtr& scope) {
    Value left = eval(*e.kids[0], scope);
    for (size_t i = 0; i < e.ops.size(); ++i) {
      Value right = eval(*e.kids[i + 1], scope);
      const std::string& op = e.ops[i];
      bool ok;
      if (op == "==") {
        ok = equals(left, right);
      } else if (op == "!=") {
        ok = !equals(left, right);
      } else if (op == "in" || op == "not in") {
        ok = contains(right, left) == (op == "in");
      } else {
        if (left.is_undefined()) fail_undefined(left);
        if (right.is_undefined()) fail_undefined(right);
        const int c = compare(left, right, op.c_str());
        ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
      }
      if (!ok) return false;
      left = std::move(right);
    }
    return true;
  }

  const TemplateImpl& t_;
  int call_depth_ = 0;
  std::vector<ScopePtr> macro_scopes_;
  std::vector<Value> namespaces_;  // assigned to with {% set ns.x = ... %}
};

template <class Json>
std::string render_json(const TemplateImpl& impl, const Json& context) {
  if (!context.is_object()) throw UserError(impl.origin + ": the render context must be a JSON object");
  return Interp(impl).render(from_json(context));
}

}  // namespace

Template Template::parse(const std::string& source, const std::string& origin) {
  return Template(parse_template(source, origin));
}

std::string Template::render(const nlohmann::json& context) const { return render_json(*impl_, context); }
std::string Template::render(const nlohmann::ordered_json& context) const { return render_json(*impl_, context); }
const std::string& Template::origin() const { return impl_->origin; }

}  // namespace tandem::models::jinja
