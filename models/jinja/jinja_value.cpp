// Internal to the Jinja interpreter: Python's semantics on runtime values (truth, str / repr,
// equality and ordering, iteration, json.dumps), so rendered text matches CPython byte for byte.
#include "models/jinja/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "models/jinja/jinja_pystr.h"

namespace tandem::models::jinja {

namespace {
// Nesting of values that repr() and json.dumps() follow; beyond it a value holds itself.
constexpr int kMaxNesting = 500;
}  // namespace

Value Value::undefined(std::string hint) {
  Value v;
  v.str_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.int_ = b ? 1 : 0;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}

Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = f;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.str_ = std::move(s);
  return v;
}

Value Value::markup(std::string s) {
  Value v = string(std::move(s));
  v.int_ = 1;
  return v;
}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::view(std::string name, ValueList items) {
  Value v = list(std::move(items));
  v.str_ = std::move(name);
  return v;
}

Value Value::iterator(std::string type, ValueList items, std::string deferred_error) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kIterator;
  v.str_ = std::move(type);
  v.cursor_ = std::make_shared<size_t>(0);
  if (!deferred_error.empty()) {
    v.dict_ = std::make_shared<Dict>();  // marks the error, kept in the first entry
    v.dict_->entries.emplace_back(Value::string(std::move(deferred_error)), Value());
  }
  return v;
}

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::ns(Dict d) {
  Value v = dict(std::move(d));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::callable(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

const void* Value::identity() const {
  if (list_) return list_.get();
  if (dict_) return dict_.get();
  if (fn_) return fn_.get();
  return nullptr;
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : entries)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (equals(k, key)) {
      v = std::move(value);  // Python keeps the first key object and its position
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Params::Params(const std::string& what, Args& args, std::vector<const char*> names, size_t required)
    : slots_(names.size(), nullptr) {
  if (args.pos.size() > names.size())
    throw JinjaError(what + "() takes at most " + std::to_string(names.size()) + " argument(s) (" +
                     std::to_string(args.pos.size()) + " given)");
  for (size_t i = 0; i < args.pos.size(); ++i) slots_[i] = &args.pos[i];
  for (auto& [key, value] : args.kw) {
    size_t i = 0;
    while (i < names.size() && key != names[i]) ++i;
    if (i == names.size()) throw JinjaError(what + "() got an unexpected keyword argument '" + key + "'");
    if (slots_[i]) throw JinjaError(what + "() got multiple values for argument '" + key + "'");
    slots_[i] = &value;
  }
  for (size_t i = 0; i < required; ++i)
    if (!slots_[i]) throw JinjaError(what + "() missing required argument '" + names[i] + "'");
}

// ---------------------------------------------------------------------------------------------
// str() and repr()

namespace {

// Assigned code points that Python's str.isprintable() rejects (Unicode 14, CPython 3.11);
// repr() escapes them. Unassigned code points are printed as they are.
constexpr char32_t kNonPrintable[][2] = {
    {0x0, 0x1f},        {0x7f, 0xa0},       {0xad, 0xad},        {0x600, 0x605},     {0x61c, 0x61c},
    {0x6dd, 0x6dd},     {0x70f, 0x70f},     {0x890, 0x891},      {0x8e2, 0x8e2},     {0x1680, 0x1680},
    {0x180e, 0x180e},   {0x2000, 0x200f},   {0x2028, 0x202f},    {0x205f, 0x2064},   {0x2066, 0x206f},
    {0x3000, 0x3000},   {0xd800, 0xf8ff},   {0xfeff, 0xfeff},    {0xfff9, 0xfffb},   {0x110bd, 0x110bd},
    {0x110cd, 0x110cd}, {0x13430, 0x13438}, {0x1bca0, 0x1bca3},  {0x1d173, 0x1d17a}, {0xe0001, 0xe0001},
    {0xe0020, 0xe007f}, {0xf0000, 0xffffd}, {0x100000, 0x10fffd}};

bool printable(char32_t cp) {
  for (const auto& r : kNonPrintable)
    if (cp >= r[0] && cp <= r[1]) return false;
  return true;
}

std::string hex(unsigned long v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%0*lx", width, v);
  return buf;
}

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : decode(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (printable(cp)) {
      out += encode(std::u32string(1, cp));
    } else if (cp < 0x100) {
      out += "\\x" + hex(cp, 2);
    } else if (cp < 0x10000) {
      out += "\\u" + hex(cp, 4);
    } else {
      out += "\\U" + hex(cp, 8);
    }
  }
  out += quote;
  return out;
}

std::string join_repr(const ValueList& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += repr(items[i]);
  }
  return out;
}

}  // namespace

std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  std::string s = buf;  // "-d.ddde+XX"
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  const int exponent = std::atoi(s.c_str() + e + 1);
  std::string digits = s.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exponent + 1;  // value = 0.DIGITS * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    std::string out = sign + digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    const int ex = decpt - 1;
    std::snprintf(buf, sizeof buf, "e%c%02d", ex < 0 ? '-' : '+', std::abs(ex));
    return out + buf;
  }
  if (decpt <= 0) return sign + "0." + std::string(-decpt, '0') + digits;
  if (decpt >= n) return sign + digits + std::string(decpt - n, '0') + ".0";
  return sign + digits.substr(0, decpt) + "." + digits.substr(decpt);
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
    case Value::Kind::kIterator:
      return v.str();
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_double() != 0.0;
    case Value::Kind::kString:
      return !v.str().empty();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return !v.items().empty();
    case Value::Kind::kDict:
      return !v.dict_ref().entries.empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
    case Value::Kind::kIterator:
      return true;
  }
  return false;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.str();
    case Value::Kind::kCallable:
    case Value::Kind::kIterator:
      // CPython prints an address here ("<generator object ... at 0x7f...>"): no stable text.
      throw JinjaError("unsupported: printing a " + type_name(v) + " object");
    default:
      return repr(v);
  }
}

std::string repr(const Value& v) {
  // Only a namespace can hold itself (the sandbox makes everything else immutable); Python
  // then stops with a RecursionError, and we must not overflow the stack.
  thread_local int depth = 0;
  struct Nest {
    Nest() {
      if (++depth > kMaxNesting) {
        --depth;
        throw JinjaError("maximum recursion depth exceeded while getting the repr of an object");
      }
    }
    ~Nest() { --depth; }
  } nest;
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return format_float(v.as_double());
    case Value::Kind::kString:
      return v.is_markup() ? "Markup(" + repr_string(v.str()) + ")" : repr_string(v.str());
    case Value::Kind::kList:
      if (v.str().rfind("range(", 0) == 0) return v.str();
      if (!v.str().empty()) return v.str() + "([" + join_repr(v.items()) + "])";
      return "[" + join_repr(v.items()) + "]";
    case Value::Kind::kTuple:
      return "(" + join_repr(v.items()) + (v.items().size() == 1 ? ",)" : ")");
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.dict_ref().entries) {
        if (!first) out += ", ";
        first = false;
        out += repr(k) + ": " + repr(val);
      }
      return out + "}";
    }
    case Value::Kind::kNamespace: {
      Value as_dict = Value::dict(v.dict_ref());
      return "<Namespace " + repr(as_dict) + ">";
    }
    default:
      return to_str(v);  // throws for callables and iterators
  }
}

// ---------------------------------------------------------------------------------------------
// Comparison

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  // A range equals a range, a view a view of its kind ("dict_keys"), never a list.
  if (a.is_sequence() && a.str().substr(0, 5) != b.str().substr(0, 5)) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kString:
      return a.str() == b.str();
    case K::kList:
    case K::kTuple: {
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case K::kDict: {
      const auto& x = a.dict_ref().entries;
      const Dict& y = b.dict_ref();
      if (x.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

int compare(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y;  // NaN compares as equal here but is never < or >
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());  // byte order of UTF-8 is code point order
    return c < 0 ? -1 : c > 0;
  }
  if (a.is_plain_sequence() && b.is_plain_sequence() && a.kind() == b.kind()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return compare(x[i], y[i], op);
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  throw JinjaError(std::string("'") + op + "' not supported between instances of '" + type_name(a) + "' and '" +
                   type_name(b) + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) throw JinjaError("'in <string>' requires string as left operand, not " + type_name(item));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      for (const auto& x : container.items())
        if (equals(x, item)) return true;
      return false;
    case Value::Kind::kDict:
      if (item.kind() == Value::Kind::kList || item.is_mapping())
        throw JinjaError("unhashable type: '" + type_name(item) + "'");
      return container.dict_ref().find(item) != nullptr;
    case Value::Kind::kIterator: {
      // `in` consumes a generator up to and including the item it finds.
      const ValueList& items = container.items();
      size_t& pos = *container.cursor_;
      if (container.dict_) throw JinjaError(container.dict_->entries[0].first.str());
      while (pos < items.size())
        if (equals(items[pos++], item)) return true;
      return false;
    }
    default:
      throw JinjaError("argument of type '" + type_name(container) + "' is not iterable");
  }
}

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kString: {
      ValueList out;
      for (char32_t cp : decode(v.str())) out.push_back(Value::string(encode(std::u32string(1, cp))));
      return out;
    }
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return v.items();
    case Value::Kind::kDict: {
      ValueList out;
      for (const auto& kv : v.dict_ref().entries) out.push_back(kv.first);
      return out;
    }
    case Value::Kind::kIterator: {
      if (v.dict_) throw JinjaError(v.dict_->entries[0].first.str());
      const size_t from = std::min(*v.cursor_, v.items().size());
      *v.cursor_ = v.items().size();
      return ValueList(v.items().begin() + from, v.items().end());
    }
    default:
      throw JinjaError("'" + type_name(v) + "' object is not iterable");
  }
}

Value next_item(const Value& v) {
  if (v.kind() == Value::Kind::kIterator) {
    if (v.dict_) throw JinjaError(v.dict_->entries[0].first.str());
    if (*v.cursor_ < v.items().size()) return v.items()[(*v.cursor_)++];
    return Value::undefined("No first item, sequence was empty.");
  }
  ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return is_ascii(v.str()) ? v.str().size() : decode(v.str()).size();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return v.items().size();
    case Value::Kind::kDict:
      return v.dict_ref().entries.size();
    default:
      throw JinjaError("object of type '" + type_name(v) + "' has no len()");
  }
}

}  // namespace tandem::models::jinja
