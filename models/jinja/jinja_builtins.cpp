// Jinja builtins: the filters and tests chat templates use, each with jinja2 3.1's (and
// transformers') exact semantics, including the argument names they accept.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>

#include "models/jinja/jinja_ast.h"

namespace tandem::models::jinja {

namespace {

using FilterFn = std::function<Value(const Value&, Args&)>;
using TestFn = std::function<bool(const Value&, Args&)>;

// jinja2's soft_str: what the string filters see.
std::u32string text_of(const Value& v) { return decode(to_str(v)); }
Value text(const std::u32string& s) { return Value::string(encode(s)); }
// The str methods of a Markup return Markup.
Value like(const Value& input, const std::u32string& s) {
  return input.is_markup() ? Value::markup(encode(s)) : text(s);
}

const std::string& want_string(const Value& v, const std::string& what) {
  if (!v.is_string()) throw JinjaError(what + " must be a string, not " + type_name(v));
  return v.str();
}

int64_t want_int(const Value& v, const std::string& what) {
  if (!v.is_int()) throw JinjaError(what + " must be an integer, not " + type_name(v));
  return v.as_int();
}

bool flag(const Params& p, size_t i) { return p.get(i) && truthy(*p.get(i)); }

// sorted()'s reverse= must be an integer (a bool is one).
bool reverse_flag(const Params& p, size_t i) {
  if (!p.given(i)) return false;
  if (!p.at(i).is_int()) throw JinjaError("'" + type_name(p.at(i)) + "' object cannot be interpreted as an integer");
  return p.at(i).as_bool();
}

// The generator a jinja2 filter returns: its items are computed now, but an error in computing
// them surfaces only when the generator is consumed, as in Python.
Value lazily(const char* type, const std::function<ValueList()>& produce) {
  try {
    return Value::iterator(type, produce());
  } catch (const JinjaError& e) {
    return Value::iterator(type, {}, e.what());
  }
}

// jinja2's make_attrgetter: "a.b.0" looks up each part with getitem (digits as integers), and an
// Undefined result is replaced by `fallback` when one is given.
Value attr_path(const Value& item, const Value& attribute, const Value* fallback) {
  std::vector<Value> parts;
  if (attribute.is_int()) {
    parts.push_back(attribute);
  } else {
    const std::string& path = want_string(attribute, "attribute");
    size_t start = 0;
    while (true) {
      const size_t dot = path.find('.', start);
      const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const bool digits =
          !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits ? Value::integer(std::strtoll(part.c_str(), nullptr, 10)) : Value::string(part));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  }
  Value v = item;
  for (const Value& part : parts) {
    v = get_item(v, part);
    if (fallback && v.is_undefined()) v = *fallback;
  }
  return v;
}

Value lower_if_str(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? text(py_lower(decode(v.str()))) : v;
}

// The sort / unique / min / max key: the item or its attribute, lowercased unless case_sensitive.
Value sort_key(const Value& item, const Value* attribute, bool case_sensitive) {
  if (!attribute) return lower_if_str(item, case_sensitive);
  if (attribute->is_string() && attribute->str().find(',') != std::string::npos) {
    ValueList keys;  // make_multi_attrgetter: "a,b" compares as a tuple
    const std::string& spec = attribute->str();
    for (size_t start = 0;;) {
      const size_t comma = spec.find(',', start);
      keys.push_back(
          lower_if_str(attr_path(item, Value::string(spec.substr(start, comma - start)), nullptr), case_sensitive));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return Value::tuple(std::move(keys));
  }
  return lower_if_str(attr_path(item, *attribute, nullptr), case_sensitive);
}

// Python's int(str, base) and float(str), which the int / float filters try.
bool parse_int(const std::string& raw, int base, int64_t* out) {
  std::string s = encode(py_strip(decode(raw), nullptr, true, true));
  std::string digits;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) digits += s[i++];
  if (i >= s.size()) return false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_' && i > 0 && std::isalnum(static_cast<unsigned char>(s[i - 1])) && i + 1 < s.size() &&
        std::isalnum(static_cast<unsigned char>(s[i + 1])))
      continue;
    const int d = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
                  : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(c) - 'a' + 10
                                                                : 99;
    if (d >= base) return false;
    digits += c;
  }
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, base);
  if (errno == ERANGE) throw JinjaError("integer too large: " + raw);
  *out = v;
  return end && *end == '\0';
}

bool parse_float(const std::string& raw, double* out) {
  std::string s = encode(py_strip(decode(raw), nullptr, true, true));
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string body = !lower.empty() && (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    *out = std::strtod(lower.c_str(), nullptr);
    return true;
  }
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (i == 0 || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return false;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-')
      return false;
    clean += c;
  }
  if (clean.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(clean.c_str(), &end);
  return end && *end == '\0' && end != clean.c_str();
}

Value filter_tojson(const Value& v, Args& args) {
  // transformers' override: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  Params p("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = flag(p, 0);
  o.sort_keys = flag(p, 3);
  if (const Value* indent = p.get(1)) {
    o.has_indent = true;
    o.indent =
        indent->is_string() ? indent->str() : std::string(std::max<int64_t>(0, want_int(*indent, "indent")), ' ');
    o.item_sep = ",";
  }
  if (const Value* sep = p.get(2)) {
    if (!sep->is_sequence() || sep->items().size() != 2)
      throw JinjaError("tojson separators must be a pair of strings");
    o.item_sep = want_string(sep->items()[0], "separator");
    o.key_sep = want_string(sep->items()[1], "separator");
  }
  return Value::string(to_json(v, o));
}

Value filter_indent(const Value& v, Args& args) {
  Params p("indent", args, {"width", "first", "blank"});
  std::string indention = "    ";
  if (const Value* w = p.get(0))
    indention = w->is_string() ? w->str() : std::string(std::max<int64_t>(0, want_int(*w, "width")), ' ');
  const std::u32string ind = decode(indention);
  const auto lines = py_splitlines(decode(want_string(v, "indent filter input")) + U"\n", false);
  std::u32string rv;
  if (flag(p, 2)) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? U"\n" + ind : U"") + lines[i];
  } else {
    rv = lines.empty() ? U"" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += U"\n" + (lines[i].empty() ? lines[i] : ind + lines[i]);
  }
  if (flag(p, 1)) rv = ind + rv;
  return text(rv);
}

// select / reject / selectattr / rejectattr share jinja2's prepare_select_or_reject.
Value select_or_reject(const Value& seq, Args& args, bool select, bool by_attr, const char* name) {
  return lazily("generator", [&]() -> ValueList {
    if (!truthy(seq)) return {};  // jinja2 checks nothing about an empty (or false) input
    size_t off = 0;
    Value attribute;
    if (by_attr) {
      if (args.pos.empty()) throw JinjaError(std::string(name) + ": missing parameter for attribute name");
      attribute = args.pos[0];
      off = 1;
    }
    const bool with_test = args.pos.size() > off;
    std::string test;
    if (with_test) test = want_string(args.pos[off], std::string(name) + " test name");
    Args test_args;
    for (size_t i = off + 1; i < args.pos.size(); ++i) test_args.pos.push_back(args.pos[i]);
    test_args.kw = args.kw;
    ValueList out;
    for (const Value& item : iterate(seq)) {
      const Value subject = by_attr ? attr_path(item, attribute, nullptr) : item;
      Args a = test_args;
      const bool hit = with_test ? apply_test(test, subject, a) : truthy(subject);
      if (hit == select) out.push_back(item);
    }
    return out;
  });
}

Value filter_map(const Value& seq, Args& args) {
  return lazily("generator", [&]() -> ValueList {
    ValueList out;
    if (!truthy(seq)) return out;  // jinja2 checks nothing about an empty (or false) input
    if (args.pos.empty() && !args.kw.empty() && args.kw[0].first == "attribute") {
      Params p("map", args, {"attribute", "default"});
      for (const Value& item : iterate(seq)) out.push_back(attr_path(item, p.at(0), p.get(1)));
      return out;
    }
    if (args.pos.empty()) throw JinjaError("map requires a filter argument");
    const std::string name = want_string(args.pos[0], "map filter name");
    for (const Value& item : iterate(seq)) {
      Args a;
      a.pos.assign(args.pos.begin() + 1, args.pos.end());
      a.kw = args.kw;
      out.push_back(apply_filter(name, item, a));
    }
    return out;
  });
}

Value filter_sort(const Value& seq, Args& args) {
  Params p("sort", args, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = reverse_flag(p, 0), case_sensitive = flag(p, 1);
  std::vector<std::pair<Value, Value>> keyed;
  // make_multi_attrgetter's keys are lists, compared element by element with == first.
  for (const Value& item : iterate(seq)) {
    Value key = sort_key(item, p.get(2), case_sensitive);
    keyed.emplace_back(key.kind() == Value::Kind::kTuple ? key : Value::tuple({key}), item);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? compare(b.first, a.first, "<") < 0 : compare(a.first, b.first, "<") < 0;
  });
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value filter_min_max(const Value& seq, Args& args, bool is_max) {
  Params p(is_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  const ValueList items = iterate(seq);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(items[0], p.get(1), flag(p, 0));
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(items[i], p.get(1), flag(p, 0));
    if (is_max ? compare(key, best_key, ">") > 0 : compare(key, best_key, "<") < 0) best = i, best_key = key;
  }
  return items[best];
}

Value filter_sum(const Value& seq, Args& args) {
  Params p("sum", args, {"attribute", "start"});
  Value total = p.get(1) ? *p.get(1) : Value::integer(0);
  for (const Value& item : iterate(seq)) {
    const Value v = p.get(0) ? attr_path(item, *p.get(0), nullptr) : item;
    if (!total.is_number() || !v.is_number())
      throw JinjaError("unsupported operand type(s) for +: '" + type_name(total) + "' and '" + type_name(v) + "'");
    total = total.is_int() && v.is_int() ? Value::integer(total.as_int() + v.as_int())
                                         : Value::number(total.as_double() + v.as_double());
  }
  return total;
}

Value filter_round(const Value& v, Args& args) {
  Params p("round", args, {"precision", "method"});
  const int64_t precision = p.get(0) ? want_int(*p.get(0), "precision") : 0;
  const std::string method = p.get(1) ? want_string(*p.get(1), "method") : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    throw JinjaError("method must be common, ceil or floor");
  if (!v.is_number()) throw JinjaError("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_int() && precision >= 0) return Value::integer(v.as_int());
    if (precision >= 0 && precision < 300) {
      char buf[400];  // printf rounds the exact binary value half to even, as Python's round()
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), v.as_double());
      return Value::number(std::strtod(buf, nullptr));
    }
    throw JinjaError("unsupported: round() with a negative precision");
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = [] {
    std::map<std::string, FilterFn> t;
    auto no_args = [](const char* name, std::function<Value(const Value&)> f) {
      return [name, f](const Value& v, Args& args) {
        Params p(name, args, {});
        return f(v);
      };
    };
    t["abs"] = no_args("abs", [](const Value& v) {
      if (v.kind() == Value::Kind::kFloat) return Value::number(std::fabs(v.as_double()));
      if (v.is_int()) return Value::integer(std::llabs(v.as_int()));
      throw JinjaError("bad operand type for abs(): '" + type_name(v) + "'");
    });
    t["attr"] = [](const Value& v, Args& args) {
      Params p("attr", args, {"name"}, 1);
      return get_own_attr(v, want_string(p.at(0), "attribute name"));
    };
    t["capitalize"] =
        no_args("capitalize", [](const Value& v) { return like(v, py_capitalize(py_lower(text_of(v)))); });
    t["length"] = t["count"] = no_args("length", [](const Value& v) { return Value::integer(length(v)); });
    t["default"] = t["d"] = [](const Value& v, Args& args) {
      Params p("default", args, {"default_value", "boolean"});
      const bool use_default = v.is_undefined() || (flag(p, 1) && !truthy(v));
      if (!use_default) return v;
      return p.given(0) ? p.at(0) : Value::string("");
    };
    t["dictsort"] = [](const Value& v, Args& args) {
      Params p("dictsort", args, {"case_sensitive", "by", "reverse"});
      const std::string by = p.get(1) ? want_string(*p.get(1), "by") : "key";
      if (by != "key" && by != "value") throw JinjaError("You can only sort by either \"key\" or \"value\"");
      if (!v.is_mapping()) throw JinjaError("dictsort needs a mapping");
      std::vector<std::pair<Value, Value>> keyed;
      for (const auto& [k, val] : v.dict_ref().entries)
        keyed.emplace_back(lower_if_str(by == "key" ? k : val, flag(p, 0)), Value::tuple({k, val}));
      const bool reverse = reverse_flag(p, 2);
      std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
        return reverse ? compare(b.first, a.first, "<") < 0 : compare(a.first, b.first, "<") < 0;
      });
      ValueList out;
      for (auto& kv : keyed) out.push_back(kv.second);
      return Value::list(std::move(out));
    };
    t["escape"] = t["e"] = no_args("escape", [](const Value& v) {
      return v.is_markup() ? v : Value::markup(html_escape(to_str(v)));  // already safe: not escaped twice
    });
    t["forceescape"] = no_args("forceescape", [](const Value& v) { return Value::markup(html_escape(to_str(v))); });
    t["first"] = no_args("first", [](const Value& v) { return next_item(v); });
    t["last"] = no_args("last", [](const Value& v) {
      if (v.kind() == Value::Kind::kIterator) throw JinjaError("'" + type_name(v) + "' object is not reversible");
      const ValueList items = iterate(v);
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    });
    t["float"] = [](const Value& v, Args& args) {
      Params p("float", args, {"default"});
      const Value fallback = p.get(0) ? *p.get(0) : Value::number(0.0);
      if (v.is_undefined()) fail_undefined(v);  // Undefined.__float__ raises
      double f;
      if (v.is_number()) return Value::number(v.as_double());
      if (v.is_string() && parse_float(v.str(), &f)) return Value::number(f);
      return fallback;
    };
    t["int"] = [](const Value& v, Args& args) {
      Params p("int", args, {"default", "base"});
      const Value fallback = p.get(0) ? *p.get(0) : Value::integer(0);
      const int base = p.get(1) ? static_cast<int>(want_int(*p.get(1), "base")) : 10;
      if (v.is_undefined()) fail_undefined(v);  // Undefined.__int__ raises
      if (v.is_int()) return Value::integer(v.as_int());
      double f = 0;
      if (v.kind() == Value::Kind::kFloat) f = v.as_double();
      int64_t i;
      if (v.is_string() && parse_int(v.str(), base, &i)) return Value::integer(i);
      if (v.is_string() && !parse_float(v.str(), &f)) return fallback;
      if (!v.is_string() && v.kind() != Value::Kind::kFloat) return fallback;
      if (std::isnan(f)) return fallback;
      if (std::isinf(f) || std::fabs(f) >= 9.2e18) throw JinjaError("cannot convert float infinity to integer");
      return Value::integer(static_cast<int64_t>(f));
    };
    t["indent"] = filter_indent;
    t["items"] = no_args("items", [](const Value& v) {
      return lazily("generator", [&] {
        ValueList out;
        if (v.is_undefined()) return out;
        if (!v.is_mapping()) throw JinjaError("Can only get item pairs from a mapping.");
        for (const auto& [k, val] : v.dict_ref().entries) out.push_back(Value::tuple({k, val}));
        return out;
      });
    });
    t["join"] = [](const Value& v, Args& args) {
      Params p("join", args, {"d", "attribute"});
      const std::string sep = p.get(0) ? to_str(*p.get(0)) : "";
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += to_str(p.get(1) ? attr_path(item, *p.get(1), nullptr) : item);
      }
      return Value::string(std::move(out));
    };
    t["list"] = no_args("list", [](const Value& v) { return Value::list(iterate(v)); });
    t["lower"] = no_args("lower", [](const Value& v) { return like(v, py_lower(text_of(v))); });
    t["upper"] = no_args("upper", [](const Value& v) { return like(v, py_upper(text_of(v))); });
    t["title"] = no_args("title", [](const Value& v) { return text(jinja_title(text_of(v))); });
    t["map"] = filter_map;
    t["max"] = [](const Value& v, Args& args) { return filter_min_max(v, args, true); };
    t["min"] = [](const Value& v, Args& args) { return filter_min_max(v, args, false); };
    t["select"] = [](const Value& v, Args& args) { return select_or_reject(v, args, true, false, "select"); };
    t["reject"] = [](const Value& v, Args& args) { return select_or_reject(v, args, false, false, "reject"); };
    t["selectattr"] = [](const Value& v, Args& args) { return select_or_reject(v, args, true, true, "selectattr"); };
    t["rejectattr"] = [](const Value& v, Args& args) { return select_or_reject(v, args, false, true, "rejectattr"); };
    t["replace"] = [](const Value& v, Args& args) {
      Params p("replace", args, {"old", "new", "count"}, 2);
      const int64_t count = p.get(2) ? want_int(*p.get(2), "count") : -1;
      return text(py_replace(text_of(v), decode(to_str(p.at(0))), decode(to_str(p.at(1))), count));
    };
    t["reverse"] = no_args("reverse", [](const Value& v) {
      if (v.is_string()) {
        std::u32string s = decode(v.str());
        std::reverse(s.begin(), s.end());
        return text(s);
      }
      ValueList items = iterate(v);
      std::reverse(items.begin(), items.end());
      // reversed() where Python has it (an iterator), else list(value) reversed.
      if (v.kind() == Value::Kind::kIterator) return Value::list(std::move(items));
      const char* type = v.kind() == Value::Kind::kTuple   ? "reversed"
                         : v.is_mapping()                  ? "dict_reversekeyiterator"
                         : v.str().rfind("range(", 0) == 0 ? "range_iterator"
                         : v.is_undefined()                ? "reversed"
                                                           : "list_reverseiterator";
      return Value::iterator(type, std::move(items));
    });
    t["round"] = filter_round;
    t["safe"] = no_args("safe", [](const Value& v) { return v.is_markup() ? v : Value::markup(to_str(v)); });
    t["sort"] = filter_sort;
    t["string"] = no_args("string", [](const Value& v) { return v.is_string() ? v : Value::string(to_str(v)); });
    t["sum"] = filter_sum;
    t["tojson"] = filter_tojson;
    t["trim"] = [](const Value& v, Args& args) {
      Params p("trim", args, {"chars"});
      std::u32string chars;
      if (p.get(0)) chars = decode(want_string(*p.get(0), "trim chars"));
      return like(v, py_strip(text_of(v), p.get(0) ? &chars : nullptr, true, true));
    };
    t["unique"] = [](const Value& v, Args& args) {
      Params p("unique", args, {"case_sensitive", "attribute"});
      return lazily("generator", [&] {
        ValueList out, seen;
        for (const Value& item : iterate(v)) {
          const Value key = sort_key(item, p.get(1), flag(p, 0));
          if (key.kind() == Value::Kind::kList || key.is_mapping())  // unique() keeps a Python set
            throw JinjaError("unhashable type: '" + type_name(key) + "'");
          if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
          seen.push_back(key);
          out.push_back(item);
        }
        return out;
      });
    };
    return t;
  }();
  return table;
}

// jinja2's `value % 2 == 1` / `value % 2 == 0`: a float like 2.5 is neither odd nor even.
bool remainder_is(const Value& v, int r) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) throw JinjaError("unsupported operand type(s) for %: '" + type_name(v) + "' and 'int'");
  return equals(binary_op("%", v, Value::integer(2)), Value::integer(r));
}

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = [] {
    std::map<std::string, TestFn> t;
    auto unary = [](const char* name, std::function<bool(const Value&)> f) {
      return [name, f](const Value& v, Args& args) {
        Params p(name, args, {});
        return f(v);
      };
    };
    auto binary = [](const char* name, std::function<bool(const Value&, const Value&)> f) {
      return [name, f](const Value& v, Args& args) {
        Params p(name, args, {"other"}, 1);
        return f(v, p.at(0));
      };
    };
    using K = Value::Kind;
    t["defined"] = unary("defined", [](const Value& v) { return !v.is_undefined(); });
    t["undefined"] = unary("undefined", [](const Value& v) { return v.is_undefined(); });
    t["none"] = unary("none", [](const Value& v) { return v.is_none(); });
    t["true"] = unary("true", [](const Value& v) { return v.kind() == K::kBool && v.as_bool(); });
    t["false"] = unary("false", [](const Value& v) { return v.kind() == K::kBool && !v.as_bool(); });
    t["boolean"] = unary("boolean", [](const Value& v) { return v.kind() == K::kBool; });
    t["integer"] = unary("integer", [](const Value& v) { return v.kind() == K::kInt; });
    t["float"] = unary("float", [](const Value& v) { return v.kind() == K::kFloat; });
    t["number"] = unary("number", [](const Value& v) { return v.is_number(); });
    t["string"] = unary("string", [](const Value& v) { return v.is_string(); });
    t["mapping"] = unary("mapping", [](const Value& v) { return v.is_mapping(); });
    // Undefined is iterable, a sequence and callable to Python: it has __iter__, __len__,
    // __getitem__ and __call__ (which raise, except __iter__ and __len__).
    auto container = [](const Value& v) {
      return v.is_string() || v.is_sequence() || v.is_mapping() || v.is_undefined();
    };
    t["iterable"] = unary("iterable", [container](const Value& v) { return container(v) || v.kind() == K::kIterator; });
    t["sequence"] = unary("sequence", container);
    t["callable"] = unary("callable", [](const Value& v) { return v.kind() == K::kCallable || v.is_undefined(); });
    t["odd"] = unary("odd", [](const Value& v) { return remainder_is(v, 1); });
    t["even"] = unary("even", [](const Value& v) { return remainder_is(v, 0); });
    t["lower"] = unary("lower", [](const Value& v) { return py_is(decode(to_str(v)), "islower"); });
    t["upper"] = unary("upper", [](const Value& v) { return py_is(decode(to_str(v)), "isupper"); });
    t["divisibleby"] = [](const Value& v, Args& args) {
      Params p("divisibleby", args, {"num"}, 1);
      const Value& num = p.at(0);
      if (!v.is_number() || !num.is_number()) throw JinjaError("divisibleby needs numbers");
      if (num.is_int() && num.as_int() == 0) throw JinjaError("integer division or modulo by zero");
      if (v.is_int() && num.is_int()) return v.as_int() % num.as_int() == 0;
      return std::fmod(v.as_double(), num.as_double()) == 0.0;
    };
    auto eq = binary("eq", [](const Value& a, const Value& b) { return equals(a, b); });
    t["eq"] = t["equalto"] = t["=="] = eq;
    t["ne"] = t["!="] = binary("ne", [](const Value& a, const Value& b) { return !equals(a, b); });
    t["lt"] = t["lessthan"] = t["<"] =
        binary("lt", [](const Value& a, const Value& b) { return compare(a, b, "<") < 0; });
    t["le"] = t["<="] = binary("le", [](const Value& a, const Value& b) { return compare(a, b, "<=") <= 0; });
    t["gt"] = t["greaterthan"] = t[">"] =
        binary("gt", [](const Value& a, const Value& b) { return compare(a, b, ">") > 0; });
    t["ge"] = t[">="] = binary("ge", [](const Value& a, const Value& b) { return compare(a, b, ">=") >= 0; });
    t["in"] = [](const Value& v, Args& args) {
      Params p("in", args, {"seq"}, 1);
      return contains(p.at(0), v);
    };
    t["sameas"] = binary("sameas", [](const Value& a, const Value& b) {
      if (a.kind() != b.kind()) return false;
      switch (a.kind()) {
        case K::kNone:
          return true;
        case K::kBool:
          return a.as_bool() == b.as_bool();
        case K::kInt:
          return a.as_int() == b.as_int() && a.as_int() >= -5 && a.as_int() <= 256;  // CPython's small ints
        case K::kString:
          return a.str() == b.str();
        case K::kUndefined:
        case K::kFloat:
          return false;
        default:
          return a.identity() == b.identity();
      }
    });
    t["filter"] = unary("filter", [](const Value& v) { return v.is_string() && has_filter(v.str()); });
    t["test"] = unary("test", [](const Value& v) { return v.is_string() && has_test(v.str()); });
    return t;
  }();
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) > 0; }
bool has_test(const std::string& name) { return tests().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& subject, Args& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) throw JinjaError("unsupported filter '" + name + "'");
  return it->second(subject, args);
}

bool apply_test(const std::string& name, const Value& subject, Args& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) throw JinjaError("unsupported test '" + name + "'");
  return it->second(subject, args);
}

}  // namespace tandem::models::jinja
