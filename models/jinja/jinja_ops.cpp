// Python's operators on runtime values (+ - * / // % ** ~ with int / float / str / list rules,
// printf-style str % args) and json.dumps, as transformers' tojson calls it.
#include <cctype>
#include <cmath>
#include <cstdio>

#include "models/jinja/jinja_ast.h"

namespace tandem::models::jinja {

namespace {

// A single string or list longer than this is an error, not an out-of-memory.
constexpr size_t kMaxValueSize = size_t{1} << 28;
// Nesting json.dumps follows; beyond it a value holds itself (through a namespace).
constexpr int kMaxJsonNesting = 500;

std::string hex(unsigned long v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*lx", width, v);
  return buf;
}

[[noreturn]] void type_error(const char* op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  throw JinjaError(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
                   type_name(b) + "'");
}

// Python's ints do not overflow; ours stop at 64 bits with an error instead of wrapping.
[[noreturn]] void overflow() { throw JinjaError("integer overflow (numbers past 64 bits are unsupported)"); }

int64_t add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}

int64_t sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}

int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

Value repeat(const Value& seq, int64_t times) {
  if (times <= 0)
    return seq.is_string() ? Value::string("") : seq.kind() == Value::Kind::kTuple ? Value::tuple({}) : Value::list({});
  const size_t unit = seq.is_string() ? seq.str().size() : seq.items().size();
  if (unit != 0 && static_cast<uint64_t>(times) > kMaxValueSize / unit) throw JinjaError("repeated sequence too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return seq.is_markup() ? Value::markup(std::move(out)) : Value::string(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.kind() == Value::Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

double floor_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// Python's printf-style `str % args` for the plain conversions %s %r %d %i %f and %%; flags,
// widths and %(name)s are unsupported.
std::string percent_format(const std::string& fmt, const Value& args) {
  // CPython treats any subscriptable non-tuple argument (a dict, but also a list) as a mapping:
  // leftover arguments are then not an error.
  const bool mapping = args.is_mapping() || (args.kind() == Value::Kind::kList &&
                                             (args.str().empty() || args.str().rfind("range(", 0) == 0));
  const ValueList values = args.kind() == Value::Kind::kTuple ? args.items() : ValueList{args};
  size_t used = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (i + 1 >= fmt.size()) throw JinjaError("incomplete format");
    char conv = fmt[++i];
    int precision = -1;
    if (conv == '.') {  // "%.2f", or "%.f" for precision 0
      precision = 0;
      while (i + 1 < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i + 1])))
        precision = precision * 10 + (fmt[++i] - '0');
      conv = i + 1 < fmt.size() ? fmt[++i] : '\0';
      if (conv != 'f') throw JinjaError("unsupported: printf-style '%' formatting with this precision");
    }
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (conv != 's' && conv != 'r' && conv != 'd' && conv != 'i' && conv != 'f')
      throw JinjaError("unsupported: printf-style '%' formatting beyond %s %r %d %i %f");
    if (used >= values.size()) throw JinjaError("not enough arguments for format string");
    const Value& v = values[used++];
    if (conv == 's') {
      out += to_str(v);
    } else if (conv == 'r') {
      out += repr(v);
    } else if (!v.is_number()) {
      throw JinjaError(std::string("%") + conv + " format: a real number is required, not " + type_name(v));
    } else if (conv == 'f') {
      char buf[400];
      if (std::fabs(v.as_double()) >= 1e50) throw JinjaError("unsupported: %f of a number this large");
      std::snprintf(buf, sizeof buf, "%.*f", precision < 0 ? 6 : std::min(precision, 100), v.as_double());
      out += buf;
    } else {
      const double d = v.as_double();
      if (!v.is_int() && (std::isnan(d) || std::isinf(d) || std::fabs(d) >= 9.2e18))
        throw JinjaError("cannot convert float to integer");
      out += std::to_string(v.is_int() ? v.as_int() : static_cast<int64_t>(d));
    }
  }
  if (used < values.size() && !mapping) throw JinjaError("not all arguments converted during string formatting");
  return out;
}

// CPython's float_floor_div, so that e.g. 7.5 // 2 and -7.5 // 2 round exactly as Python does.
double float_floor_div(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0 && ((wx < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, vx / wx);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

Value apply_binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  const bool ints = a.is_int() && b.is_int(), nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) return Value::integer(add(a.as_int(), b.as_int()));
    if (nums) return Value::number(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      if (!a.is_markup() && !b.is_markup()) return Value::string(a.str() + b.str());
      // Markup + str escapes the str (and str + Markup too, through Markup.__radd__).
      return Value::markup((a.is_markup() ? a.str() : html_escape(a.str())) +
                           (b.is_markup() ? b.str() : html_escape(b.str())));
    }
    if (a.is_plain_sequence() && b.is_plain_sequence() && a.kind() == b.kind()) {
      ValueList items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.kind() == Value::Kind::kTuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    if (a.is_string() && !b.is_undefined())
      throw JinjaError("can only concatenate str (not \"" + type_name(b) + "\") to str");
    type_error("+", a, b);
  }
  if (op == "-") {
    if (ints) return Value::integer(sub(a.as_int(), b.as_int()));
    if (nums) return Value::number(a.as_double() - b.as_double());
    type_error("-", a, b);
  }
  if (op == "*") {
    if (ints) return Value::integer(mul(a.as_int(), b.as_int()));
    if (nums) return Value::number(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_plain_sequence()) && b.is_int()) return repeat(a, b.as_int());
    if (a.is_int() && (b.is_string() || b.is_plain_sequence())) return repeat(b, a.as_int());
    type_error("*", a, b);
  }
  if (op == "/" || op == "//" || op == "%") {
    if (a.is_string() && op == "%") return Value::string(percent_format(a.str(), b));
    if (!nums) type_error(op.c_str(), a, b);
    if (b.as_double() == 0)
      throw JinjaError(ints && op != "/" ? "integer division or modulo by zero" : "division by zero");
    if (op == "/") return Value::number(a.as_double() / b.as_double());
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (x == INT64_MIN && y == -1) overflow();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
      return Value::integer(op == "//" ? q : m);
    }
    if (op == "%") return Value::number(floor_mod(a.as_double(), b.as_double()));
    return Value::number(float_floor_div(a.as_double(), b.as_double()));
  }
  if (op == "**") {
    if (!nums) type_error("** or pow()", a, b);
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), result = 1;
      for (int64_t e = b.as_int(); e > 0; e >>= 1) {
        if (e & 1) result = mul(result, base);
        if (e > 1) base = mul(base, base);
      }
      return Value::integer(result);
    }
    if (a.as_double() == 0 && b.as_double() < 0) throw JinjaError("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  throw JinjaError("unknown operator " + op);
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  Value r = apply_binary(op, a, b);
  if ((r.is_string() && r.str().size() > kMaxValueSize) || (r.is_sequence() && r.items().size() > kMaxValueSize))
    throw JinjaError("value too large");
  return r;
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t cp : decode(s)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (cp < 0x20) {
          out += "\\u" + hex(cp, 4);
        } else if (cp < 0x7F || !ensure_ascii) {
          out += encode(std::u32string(1, cp));
        } else if (cp < 0x10000) {
          out += "\\u" + hex(cp, 4);
        } else {
          const char32_t v = cp - 0x10000;
          out += "\\u" + hex(0xD800 + (v >> 10), 4) + "\\u" + hex(0xDC00 + (v & 0x3FF), 4);
        }
    }
  }
  out += '"';
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return format_float(f);
}

std::string json_key(const Value& k, bool ensure_ascii) {
  std::string out;
  switch (k.kind()) {
    case Value::Kind::kString:
      json_string(out, k.str(), ensure_ascii);
      return out;
    case Value::Kind::kBool:
      return k.as_bool() ? "\"true\"" : "\"false\"";
    case Value::Kind::kInt:
      return "\"" + std::to_string(k.as_int()) + "\"";
    case Value::Kind::kFloat:
      return "\"" + json_float(k.as_double()) + "\"";
    case Value::Kind::kNone:
      return "\"null\"";
    default:
      throw JinjaError("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int level) {
  if (level > kMaxJsonNesting) throw JinjaError("Circular reference detected");
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat:
      out += json_float(v.as_double());
      return;
    case Value::Kind::kString:
      json_string(out, v.str(), o.ensure_ascii);
      return;
    case Value::Kind::kList:
      if (!v.str().empty()) {
        const std::string type = v.str().substr(0, v.str().find('('));
        throw JinjaError("Object of type " + type + " is not JSON serializable");
      }
      break;
    case Value::Kind::kTuple:
    case Value::Kind::kDict:
      break;
    default:
      throw JinjaError("Object of type " + type_name(v) + " is not JSON serializable");
  }
  const bool is_dict = v.kind() == Value::Kind::kDict;
  const size_t n = is_dict ? v.dict_ref().entries.size() : v.items().size();
  if (n == 0) {
    out += is_dict ? "{}" : "[]";
    return;
  }
  std::string separator = o.item_sep, newline_indent;
  if (o.has_indent) {
    newline_indent = "\n";
    for (int i = 0; i <= level; ++i) newline_indent += o.indent;
    separator += newline_indent;
  }
  out += is_dict ? '{' : '[';
  out += newline_indent;
  if (is_dict) {
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& kv : v.dict_ref().entries) entries.push_back(&kv);
    if (o.sort_keys)
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return compare(a->first, b->first, "<") < 0; });
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) out += separator;
      out += json_key(entries[i]->first, o.ensure_ascii) + o.key_sep;
      json_value(out, entries[i]->second, o, level + 1);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      if (i) out += separator;
      json_value(out, v.items()[i], o, level + 1);
    }
  }
  if (o.has_indent) {
    out += "\n";
    for (int i = 0; i < level; ++i) out += o.indent;
  }
  out += is_dict ? '}' : ']';
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(out, v, options, 0);
  return out;
}

}  // namespace tandem::models::jinja
