// Internal to the Jinja interpreter: the runtime value (Python's None, bool, int, float, str, list,
// tuple, dict, jinja2's Undefined and Namespace, callables) and the Python semantics on it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tandem::models::jinja {

// A runtime error without a location: the evaluator adds "<origin>:<line>: " where it catches it,
// so helpers deep in the value code need not know where in the template they run.
struct JinjaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Value;
struct Dict;
using ValueList = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

struct Args {
  ValueList pos;
  Kwargs kw;
};

using NativeFn = std::function<Value(Args&)>;

struct Callable {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kNamespace,
    kCallable,
    kIterator,  // a one-shot generator, what select / map / unique / items / reverse return
  };

  Value() = default;  // Undefined
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  // markupsafe's Markup, what |safe and |escape return: it prints as its text, but `+` escapes a
  // plain str joined to it and repr() shows Markup('...').
  static Value markup(std::string s);
  static Value list(ValueList items);
  // A list that prints as a dict view, "dict_items([...])", as d.items() / keys() / values() do,
  // or as Python's range object does ("range(0, 3)").
  static Value view(std::string name, ValueList items);
  // A Python generator over `items`: always true, no len(), consumed by iteration. A filter that
  // would fail while producing items fails only when it is consumed: `deferred_error`.
  static Value iterator(std::string type, ValueList items, std::string deferred_error = "");
  static Value tuple(ValueList items);
  static Value dict(Dict d);
  static Value ns(Dict d);  // jinja2's namespace(): a dict with attribute assignment
  static Value callable(std::string name, NativeFn fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && int_ != 0; }
  bool is_int() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }  // bool is an int, as in Python
  bool is_number() const { return is_int() || kind_ == Kind::kFloat; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  // A real list or tuple: not a dict view or a range, which Python does not add, multiply or order.
  bool is_plain_sequence() const { return is_sequence() && str_.empty(); }
  bool is_mapping() const { return kind_ == Kind::kDict; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return str_; }  // the string, an Undefined's hint, a view's or iterator's type
  const ValueList& items() const { return *list_; }
  const Dict& dict_ref() const { return *dict_; }
  Dict& ns_ref() const { return *dict_; }  // namespaces are shared and mutable
  const Callable& fn() const { return *fn_; }
  const void* identity() const;  // for `is sameas` on containers

 private:
  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0.0;
  std::string str_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Callable> fn_;
  std::shared_ptr<size_t> cursor_;  // an iterator's position, shared by its copies
  friend ValueList iterate(const Value& v);
  friend Value next_item(const Value& v);
  friend bool contains(const Value& container, const Value& item);
};

// Insertion-ordered like Python's dict. Lookups are linear: template dicts are small.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(Value key, Value value);
};

// Positional and keyword arguments bound to a Python-style parameter list; too many, unknown,
// repeated or missing (the first `required`) arguments are a JinjaError naming `what`.
class Params {
 public:
  Params(const std::string& what, Args& args, std::vector<const char*> names, size_t required = 0);
  // Python's None counts as "not given" for optional parameters.
  const Value* get(size_t i) const { return slots_[i] && !slots_[i]->is_none() ? slots_[i] : nullptr; }
  const Value& at(size_t i) const { return *slots_[i]; }  // a required or given parameter, None or not
  bool given(size_t i) const { return slots_[i] != nullptr; }

 private:
  std::vector<const Value*> slots_;
};

// Python's type names, for messages ("'int' object is not iterable").
std::string type_name(const Value& v);
bool truthy(const Value& v);
std::string to_str(const Value& v);  // Python's str(); Undefined prints as ""
std::string repr(const Value& v);
std::string format_float(double f);  // Python's repr of a float: shortest round trip, "1.0", "1e-05"
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b, const char* op);  // -1/0/1, or JinjaError for unorderable types
bool contains(const Value& container, const Value& item);     // Python's `item in container`

// Python's iter(): a str yields its characters, a dict its keys, an Undefined nothing, an iterator
// what it has left (consuming it).
ValueList iterate(const Value& v);
// next(iter(v)): the first item (consuming one item of an iterator), or Undefined when empty.
Value next_item(const Value& v);
int64_t length(const Value& v);  // Python's len()

struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;
  bool has_separators = false;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);  // Python's json.dumps
std::string html_escape(const std::string& s);                    // markupsafe's escape()

}  // namespace tandem::models::jinja
