// A recursive-descent evaluator: expr := term (('+'|'-') term)*, term := unary (('*'|'/') unary)*,
// unary := '-' unary | '(' expr ')' | number. Integers stay exact while no division or decimal
// enters; an exact integer division stays an integer.
#include "core/env/arithmetic.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>

#include "common/error.h"
#include "models/tokenizers/utf8.h"

namespace tandem::env {

namespace {

struct Value {
  bool integer = true;
  int64_t i = 0;
  double d = 0;
  double real() const { return integer ? static_cast<double>(i) : d; }
};

class Parser {
 public:
  explicit Parser(const std::string& text) : text_(text) {}

  Value parse() {
    if (text_.size() > 1000) fail("the expression is longer than 1000 characters");
    Value v = expr(0);
    skip();
    if (at_ < text_.size()) {  // the whole character, never a byte cut from one
      const size_t len = std::max<size_t>(1, models::utf8::sequence_length(text_, at_));
      fail("unexpected '" + text_.substr(at_, len) + "'");
    }
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    // Valid UTF-8 always: the message goes into the conversation, which is tokenised.
    throw UserError(models::utf8::make_valid(what + " at " + std::to_string(at_) + " in '" + text_ + "'"));
  }
  void skip() {
    while (at_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[at_]))) ++at_;
  }
  bool eat(char c) {
    skip();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }

  Value expr(int depth) {
    Value v = term(depth);
    for (;;) {
      if (eat('+'))
        v = combine(v, term(depth), '+');
      else if (eat('-'))
        v = combine(v, term(depth), '-');
      else
        return v;
    }
  }
  Value term(int depth) {
    Value v = unary(depth);
    for (;;) {
      if (eat('*'))
        v = combine(v, unary(depth), '*');
      else if (eat('/'))
        v = combine(v, unary(depth), '/');
      else
        return v;
    }
  }
  Value unary(int depth) {
    if (depth > 100) fail("nesting deeper than 100");
    if (eat('-')) return combine(Value{}, unary(depth + 1), '-');
    if (eat('+')) return unary(depth + 1);
    if (eat('(')) {
      Value v = expr(depth + 1);
      if (!eat(')')) fail("expected ')'");
      return v;
    }
    return number();
  }
  Value number() {
    skip();
    const size_t start = at_;
    while (at_ < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[at_])) || text_[at_] == '.')) ++at_;
    const std::string digits = text_.substr(start, at_ - start);
    if (digits.empty() || digits == ".") {
      at_ = start;
      fail("expected a number");
    }
    Value v;
    if (digits.find('.') == std::string::npos && digits.size() <= 18) {
      v.i = std::stoll(digits);
    } else {
      v.integer = false;
      std::istringstream in(digits);
      if (!(in >> v.d) || !in.eof()) {
        at_ = start;
        fail("'" + digits + "' is not a number");
      }
    }
    return v;
  }
  Value combine(const Value& a, const Value& b, char op) {
    Value r;
    if (a.integer && b.integer) {
      bool overflow = false;
      switch (op) {
        case '+':
          overflow = __builtin_add_overflow(a.i, b.i, &r.i);
          break;
        case '-':
          overflow = __builtin_sub_overflow(a.i, b.i, &r.i);
          break;
        case '*':
          overflow = __builtin_mul_overflow(a.i, b.i, &r.i);
          break;
        case '/':
          if (b.i == 0) fail("division by zero");
          // The guard first: INT64_MIN % -1 traps (SIGFPE) as INT64_MIN / -1 does; that quotient
          // leaves int64 and is computed as a real below.
          if (!(a.i == std::numeric_limits<int64_t>::min() && b.i == -1) && a.i % b.i == 0) {
            r.i = a.i / b.i;
            return r;
          }
          r.integer = false;
          r.d = static_cast<double>(a.i) / static_cast<double>(b.i);
          return r;
      }
      if (overflow) fail("integer overflow");
      return r;
    }
    r.integer = false;
    const double x = a.real(), y = b.real();
    if (op == '/' && y == 0) fail("division by zero");
    r.d = op == '+' ? x + y : op == '-' ? x - y : op == '*' ? x * y : x / y;
    if (!std::isfinite(r.d)) fail("the result is not finite");
    return r;
  }

  const std::string& text_;
  size_t at_ = 0;
};

}  // namespace

std::string evaluate_arithmetic(const std::string& expression) {
  const Value v = Parser(expression).parse();
  if (v.integer) return std::to_string(v.i);
  std::ostringstream out;
  out.precision(12);
  out << v.d;
  return out.str();
}

}  // namespace tandem::env
