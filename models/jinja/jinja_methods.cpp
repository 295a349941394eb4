// Jinja runtime access: the immutable sandbox's getattr / getitem, slicing, calls, the Python
// methods of str, dict and list that chat templates call (split, strip, items, get...), and the
// globals (range, namespace, dict, raise_exception, strftime_now).
#include <algorithm>
#include <ctime>
#include <set>

#include "models/jinja/jinja_ast.h"

namespace tandem::models::jinja {

namespace {

// Every method CPython has on these types: a name from here that we do not implement is an
// unsupported construct (an error), while any other name is just a missing attribute (Undefined).
const std::set<std::string> kStrMethods = {
    "capitalize",   "casefold",   "center",    "count",       "encode",    "endswith",     "expandtabs",   "find",
    "format",       "format_map", "index",     "isalnum",     "isalpha",   "isascii",      "isdecimal",    "isdigit",
    "isidentifier", "islower",    "isnumeric", "isprintable", "isspace",   "istitle",      "isupper",      "join",
    "ljust",        "lower",      "lstrip",    "maketrans",   "partition", "removeprefix", "removesuffix", "replace",
    "rfind",        "rindex",     "rjust",     "rpartition",  "rsplit",    "rstrip",       "split",        "splitlines",
    "startswith",   "strip",      "swapcase",  "title",       "translate", "upper",        "zfill"};
const std::set<std::string> kDictMethods = {"clear", "copy",    "fromkeys",   "get",    "items", "keys",
                                            "pop",   "popitem", "setdefault", "update", "values"};
const std::set<std::string> kListMethods = {"append", "clear", "copy",   "count",   "extend", "index",
                                            "insert", "pop",   "remove", "reverse", "sort"};

const std::string& want_str(const Value* v, const std::string& what) {
  if (!v->is_string()) throw JinjaError(what + " must be str, not " + type_name(*v));
  return v->str();
}

int64_t want_int(const Value* v, const std::string& what) {
  if (!v->is_int()) throw JinjaError(what + " must be an integer, not " + type_name(*v));
  return v->as_int();
}

// Python's slice.indices() clamping of an optional start / end against a length.
// A start past the end stays past it (CPython then finds nothing).
int64_t clamp_index(const Value* v, int64_t n, int64_t fallback, bool clamp_upper = true) {
  if (!v) return fallback;
  int64_t i = want_int(v, "slice indices");
  if (i < 0) i = std::max<int64_t>(0, i + n);
  return clamp_upper ? std::min(i, n) : i;
}

Value str_list(std::vector<std::u32string> parts) {
  ValueList out;
  for (auto& p : parts) out.push_back(Value::string(encode(p)));
  return Value::list(std::move(out));
}

Value str_method(const std::string& self, const std::string& name, Args& args) {
  const std::string what = "str." + name;
  const std::u32string s = decode(self);
  const auto n = static_cast<int64_t>(s.size());
  if (name == "startswith" || name == "endswith") {
    Params p(what, args, {"prefix", "start", "end"}, 1);
    const int64_t start = clamp_index(p.get(1), n, 0, false), end = clamp_index(p.get(2), n, n);
    if (start > n) return Value::boolean(false);
    const std::u32string window = start <= end ? s.substr(start, end - start) : std::u32string();
    std::vector<std::u32string> options;
    if (p.at(0).kind() == Value::Kind::kTuple) {
      for (const auto& v : p.at(0).items()) options.push_back(decode(want_str(&v, what + " prefix")));
    } else {
      options.push_back(decode(want_str(&p.at(0), what + " prefix")));
    }
    for (const auto& o : options) {
      if (o.size() > window.size()) continue;
      const bool hit = name == "startswith" ? window.compare(0, o.size(), o) == 0
                                            : window.compare(window.size() - o.size(), o.size(), o) == 0;
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "split" || name == "rsplit") {
    Params p(what, args, {"sep", "maxsplit"});
    const int64_t maxsplit = p.get(1) ? want_int(p.get(1), "maxsplit") : -1;
    if (!p.get(0)) return str_list(py_split_whitespace(s, maxsplit, name == "rsplit"));
    const std::u32string sep = decode(want_str(p.get(0), "separator"));
    if (sep.empty()) throw JinjaError("empty separator");
    return str_list(py_split(s, sep, maxsplit, name == "rsplit"));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Params p(what, args, {"chars"});
    const std::u32string* chars = nullptr;
    std::u32string set;
    if (p.get(0)) {
      set = decode(want_str(p.get(0), what + " arg"));
      chars = &set;
    }
    return Value::string(encode(py_strip(s, chars, name != "rstrip", name != "lstrip")));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase" ||
      name == "casefold") {
    Params p(what, args, {});
    if (name == "upper") return Value::string(encode(py_upper(s)));
    if (name == "lower" || name == "casefold") return Value::string(encode(py_lower(s)));
    if (name == "title") return Value::string(encode(py_title(s)));
    if (name == "capitalize") return Value::string(encode(py_capitalize(s)));
    return Value::string(encode(py_swapcase(s)));
  }
  if (name == "replace") {
    Params p(what, args, {"old", "new", "count"}, 2);
    const int64_t count = p.get(2) ? want_int(p.get(2), "count") : -1;
    return Value::string(
        encode(py_replace(s, decode(want_str(&p.at(0), "old")), decode(want_str(&p.at(1), "new")), count)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Params p(what, args, {"sub", "start", "end"}, 1);
    const std::u32string sub = decode(want_str(&p.at(0), "substring"));
    const int64_t start = clamp_index(p.get(1), n, 0, false), end = clamp_index(p.get(2), n, n);
    if (name == "count") return Value::integer(py_count(s, sub, start, end));
    const int64_t at = py_find(s, sub, start, end, name[0] == 'r');
    if (at < 0 && name.find("index") != std::string::npos) throw JinjaError("substring not found");
    return Value::integer(at);
  }
  if (name == "join") {
    Params p(what, args, {"iterable"}, 1);
    std::string out;
    bool first = true;
    for (const auto& item : iterate(p.at(0))) {
      if (!item.is_string()) throw JinjaError("sequence item: expected str instance, " + type_name(item) + " found");
      if (!first) out += self;
      first = false;
      out += item.str();
    }
    return Value::string(std::move(out));
  }
  if (name == "splitlines") {
    Params p(what, args, {"keepends"});
    return str_list(py_splitlines(s, p.get(0) && truthy(*p.get(0))));
  }
  if (name == "partition" || name == "rpartition") {
    Params p(what, args, {"sep"}, 1);
    const std::u32string sep = decode(want_str(&p.at(0), "separator"));
    if (sep.empty()) throw JinjaError("empty separator");
    const int64_t at = py_find(s, sep, 0, n, name[0] == 'r');
    ValueList parts;
    if (at < 0) {
      parts = name[0] == 'r' ? ValueList{Value::string(""), Value::string(""), Value::string(self)}
                             : ValueList{Value::string(self), Value::string(""), Value::string("")};
    } else {
      parts = {Value::string(encode(s.substr(0, at))), Value::string(encode(sep)),
               Value::string(encode(s.substr(at + sep.size())))};
    }
    return Value::tuple(std::move(parts));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Params p(what, args, {"affix"}, 1);
    const std::u32string affix = decode(want_str(&p.at(0), what + " arg"));
    if (affix.size() > s.size()) return Value::string(self);
    if (name == "removeprefix")
      return Value::string(s.compare(0, affix.size(), affix) == 0 ? encode(s.substr(affix.size())) : self);
    return Value::string(s.compare(s.size() - affix.size(), affix.size(), affix) == 0
                             ? encode(s.substr(0, s.size() - affix.size()))
                             : self);
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
      name == "islower") {
    Params p(what, args, {});
    return Value::boolean(py_is(s, name));
  }
  throw JinjaError("unsupported method str." + name + "()");
}

Value dict_method(const Value& self, const std::string& name, Args& args) {
  const std::string what = "dict." + name;
  const Dict& d = self.dict_ref();
  if (name == "items" || name == "keys" || name == "values") {
    Params p(what, args, {});
    ValueList out;
    for (const auto& [k, v] : d.entries) out.push_back(name == "items" ? Value::tuple({k, v}) : name == "keys" ? k : v);
    return Value::view(name == "items" ? "dict_items" : name == "keys" ? "dict_keys" : "dict_values", std::move(out));
  }
  if (name == "get") {
    Params p(what, args, {"key", "default"}, 1);
    const Value* hit = d.find(p.at(0));
    if (hit) return *hit;
    return p.get(1) ? *p.get(1) : Value::none();
  }
  throw JinjaError("unsupported method dict." + name + "() (the sandbox is immutable)");
}

Value list_method(const Value& self, const std::string& name, Args& args) {
  if (name == "count" || name == "index") {
    Params p("list." + name, args, {"value"}, 1);
    const ValueList& items = self.items();
    int64_t count = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!equals(items[i], p.at(0))) continue;
      if (name == "index") return Value::integer(static_cast<int64_t>(i));
      ++count;
    }
    if (name == "index") throw JinjaError(repr(p.at(0)) + " is not in list");
    return Value::integer(count);
  }
  throw JinjaError("unsupported method list." + name + "() (the sandbox is immutable)");
}

// A bound method: `self` is captured by value (values are immutable, namespaces aside).
Value method(const Value& self, const std::string& name) {
  return Value::callable(name, [self, name](Args& args) {
    if (self.is_string()) return str_method(self.str(), name, args);
    if (self.is_mapping()) return dict_method(self, name, args);
    return list_method(self, name, args);
  });
}

// The object's own attribute (a method), or nullopt-like Undefined when it has none.
bool find_method(const Value& obj, const std::string& name, Value* out) {
  const bool known = (obj.is_string() && kStrMethods.count(name)) || (obj.is_mapping() && kDictMethods.count(name)) ||
                     (obj.is_sequence() && kListMethods.count(name));
  if (known) *out = method(obj, name);
  return known;
}

std::string object_name(const Value& v) {
  return v.is_mapping() ? "dict object" : v.is_sequence() ? type_name(v) + " object" : type_name(v) + " object";
}

int64_t want_integer(const Value& v, const std::string& what) {
  if (!v.is_int()) throw JinjaError(what + " must be an integer, not " + type_name(v));
  return v.as_int();
}

Value dict_from_args(Args& args, const char* what) {
  if (args.pos.size() > 1) throw JinjaError(std::string(what) + " expected at most 1 positional argument");
  Dict d;
  if (!args.pos.empty()) {
    const Value& src = args.pos[0];
    if (src.is_mapping() || src.kind() == Value::Kind::kNamespace) {
      d = src.dict_ref();
    } else {
      for (const Value& pair : iterate(src)) {
        const ValueList kv = iterate(pair);
        if (kv.size() != 2)
          throw JinjaError("dictionary update sequence element has length " + std::to_string(kv.size()) +
                           "; 2 is required");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.kw) d.set(Value::string(k), v);
  return Value::dict(std::move(d));
}

std::string strftime_now(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  if (format.empty()) return "";
  for (size_t size = 256; size <= (1u << 20); size *= 4) {
    std::string buf(size, '\0');
    // A trailing space tells an empty result apart from a buffer that is too small.
    const size_t n = std::strftime(buf.data(), buf.size(), (format + " ").c_str(), &local);
    if (n > 0) return buf.substr(0, n - 1);
  }
  throw JinjaError("strftime_now: result too long");
}

Value unsupported_global(const std::string& name) {
  return Value::callable(name, [name](Args&) -> Value { throw JinjaError("unsupported global '" + name + "'"); });
}

}  // namespace

Value get_own_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  Value m;
  if (find_method(obj, name, &m)) return m;
  if (obj.kind() == Value::Kind::kNamespace) {
    if (const Value* v = obj.dict_ref().find(name)) return *v;
  }
  return Value::undefined("'" + object_name(obj) + "' has no attribute '" + name + "'");
}

[[noreturn]] void fail_undefined(const Value& v) {
  throw JinjaError(v.str().empty() ? "undefined value used" : v.str());
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  Value m;
  if (find_method(obj, name, &m)) return m;
  if (obj.is_mapping() || obj.kind() == Value::Kind::kNamespace) {
    if (const Value* v = obj.dict_ref().find(name)) return *v;
  }
  return Value::undefined("'" + object_name(obj) + "' has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_mapping()) {
    if (const Value* v = obj.dict_ref().find(key)) return *v;
  } else if ((obj.is_string() || (obj.is_sequence() && obj.str().rfind("dict_", 0) != 0)) && key.is_int()) {
    // (dict views are not subscriptable: the sandbox then gives Undefined)
    int64_t i = key.as_int();
    if (obj.is_sequence()) {
      const auto n = static_cast<int64_t>(obj.items().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.items()[i];
    } else {
      const std::u32string s = decode(obj.str());
      const auto n = static_cast<int64_t>(s.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::string(encode(s.substr(i, 1)));
    }
    return Value::undefined("'" + object_name(obj) + "' has no element " + std::to_string(key.as_int()));
  }
  // Not an item: the sandbox falls back to the attribute of that name.
  if (key.is_string()) {
    Value m;
    if (find_method(obj, key.str(), &m)) return m;
    if (obj.kind() == Value::Kind::kNamespace) {
      if (const Value* v = obj.dict_ref().find(key.str())) return *v;
    }
  }
  return Value::undefined("'" + object_name(obj) + "' has no attribute " + repr(key));
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  // jinja2 compiles a slice to a plain Python subscript (not the sandbox's getitem), so its
  // TypeErrors propagate.
  for (const Value* v : {&start, &stop, &step})
    if (!v->is_none() && !v->is_int())
      throw JinjaError("slice indices must be integers or None or have an __index__ method");
  auto index = [](const Value& v) -> const Value* { return v.is_none() ? nullptr : &v; };
  const Value *a = index(start), *b = index(stop), *c = index(step);
  const int64_t st = c ? c->as_int() : 1;
  if (st == 0) throw JinjaError("slice step cannot be zero");
  std::u32string s;
  const bool is_str = obj.is_string();
  if (is_str) {
    s = decode(obj.str());
  } else if (obj.is_mapping()) {
    throw JinjaError("unhashable type: 'slice'");
  } else if (!obj.is_sequence()) {
    throw JinjaError("'" + type_name(obj) + "' object is not subscriptable");
  }
  const int64_t n = is_str ? static_cast<int64_t>(s.size()) : static_cast<int64_t>(obj.items().size());
  const int64_t lower = st > 0 ? 0 : -1, upper = st > 0 ? n : n - 1;
  auto bound = [&](const Value* v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = v->as_int();
    if (i < 0) return std::max(i + n, lower);
    return std::min(i, upper);
  };
  const int64_t from = bound(a, st > 0 ? lower : upper), to = bound(b, st > 0 ? upper : lower);
  std::u32string sub;
  ValueList items;
  for (int64_t i = from; st > 0 ? i < to : i > to; i += st) {
    if (is_str) {
      sub.push_back(s[i]);
    } else {
      items.push_back(obj.items()[i]);
    }
  }
  if (is_str) return Value::string(encode(sub));
  return obj.kind() == Value::Kind::kTuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

Value call(const Value& fn, Args& args) {
  if (fn.is_undefined()) fail_undefined(fn);
  if (fn.kind() != Value::Kind::kCallable) throw JinjaError("'" + type_name(fn) + "' object is not callable");
  return fn.fn().fn(args);
}

Value lookup_global(const std::string& name) {
  if (name == "range") {
    static const Value fn = Value::callable("range", [](Args& args) {
      if (!args.kw.empty()) throw JinjaError("range() takes no keyword arguments");
      if (args.pos.empty() || args.pos.size() > 3) throw JinjaError("range expected 1 to 3 arguments");
      int64_t start = 0, stop, step = 1;
      if (args.pos.size() == 1) {
        stop = want_integer(args.pos[0], "range() argument");
      } else {
        start = want_integer(args.pos[0], "range() argument");
        stop = want_integer(args.pos[1], "range() argument");
        if (args.pos.size() == 3) step = want_integer(args.pos[2], "range() argument");
      }
      if (step == 0) throw JinjaError("range() arg 3 must not be zero");
      const int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                                 : (start > stop ? (start - stop - step - 1) / -step : 0);
      if (n > 100000) throw JinjaError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      ValueList out;
      for (int64_t i = 0; i < n; ++i) out.push_back(Value::integer(start + i * step));
      std::string repr = "range(" + std::to_string(start) + ", " + std::to_string(stop);
      if (step != 1) repr += ", " + std::to_string(step);
      return Value::view(repr + ")", std::move(out));
    });
    return fn;
  }
  if (name == "namespace") {
    static const Value fn = Value::callable("namespace", [](Args& args) {
      Value d = dict_from_args(args, "namespace");
      return Value::ns(d.dict_ref());
    });
    return fn;
  }
  if (name == "dict") {
    static const Value fn = Value::callable("dict", [](Args& args) { return dict_from_args(args, "dict"); });
    return fn;
  }
  if (name == "raise_exception") {
    static const Value fn = Value::callable("raise_exception", [](Args& args) -> Value {
      Params p("raise_exception", args, {"message"}, 1);
      throw JinjaError(to_str(p.at(0)));
    });
    return fn;
  }
  if (name == "strftime_now") {
    static const Value fn = Value::callable("strftime_now", [](Args& args) {
      Params p("strftime_now", args, {"format"}, 1);
      return Value::string(strftime_now(want_str(&p.at(0), "strftime_now format")));
    });
    return fn;
  }
  if (name == "lipsum" || name == "cycler" || name == "joiner") return unsupported_global(name);
  return Value::undefined("'" + name + "' is undefined");
}

}  // namespace tandem::models::jinja
