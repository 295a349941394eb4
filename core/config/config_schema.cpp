// The two walkers over the recipe schema: Loader (YAML -> structs, strict) and Dumper
// (structs -> YAML). Every key's type and range error is raised here, naming its full path.
#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "core/config/config_schema.h"

namespace tandem {

namespace {

std::string join_path(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

// Shortest decimal that reads back to the same double, so dumps are exact and readable.
std::string format_double(double x) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), x);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep it visibly a float
  return s;
}

std::string format_number(double x, bool integral) {
  if (integral) return std::to_string(static_cast<int64_t>(x));
  return format_double(x);
}

std::string describe_node(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "null";
}

[[noreturn]] void fail(const std::string& path, const std::string& message) { throw UserError(path + ": " + message); }

void check_range(const std::string& path, double x, const schema::Range& r, bool integral) {
  const bool low_ok = r.lo_open ? x > r.lo : x >= r.lo;
  const bool high_ok = r.hi_open ? x < r.hi : x <= r.hi;
  if (low_ok && high_ok) return;
  std::string allowed;
  const bool has_lo = std::isfinite(r.lo), has_hi = std::isfinite(r.hi);
  if (has_lo && has_hi) {
    allowed = std::string(r.lo_open ? "(" : "[") + format_number(r.lo, integral) + ", " +
              format_number(r.hi, integral) + (r.hi_open ? ")" : "]");
  } else if (has_lo) {
    allowed = std::string(r.lo_open ? "> " : ">= ") + format_number(r.lo, integral);
  } else {
    allowed = std::string(r.hi_open ? "< " : "<= ") + format_number(r.hi, integral);
  }
  std::string msg = format_number(x, integral) + " is out of range; must be " + allowed;
  if (r.why) msg += std::string(" (") + r.why + ")";
  fail(path, msg);
}

const YAML::Node& require_scalar(const std::string& path, const YAML::Node& node, const char* what) {
  if (!node.IsScalar()) fail(path, std::string("expected ") + what + ", got " + describe_node(node));
  return node;
}

int64_t parse_int(const std::string& path, const YAML::Node& node) {
  require_scalar(path, node, "an integer");
  try {
    return node.as<int64_t>();
  } catch (const YAML::Exception&) {
    fail(path, "expected an integer, got '" + node.Scalar() + "'");
  }
}

double parse_double(const std::string& path, const YAML::Node& node) {
  require_scalar(path, node, "a number");
  double x = 0;
  try {
    x = node.as<double>();
  } catch (const YAML::Exception&) {
    fail(path, "expected a number, got '" + node.Scalar() + "'");
  }
  if (!std::isfinite(x)) fail(path, "must be a finite number, got '" + node.Scalar() + "'");
  return x;
}

bool parse_bool(const std::string& path, const YAML::Node& node) {
  require_scalar(path, node, "true or false");
  try {
    return node.as<bool>();
  } catch (const YAML::Exception&) {
    fail(path, "expected true or false, got '" + node.Scalar() + "'");
  }
}

std::string parse_string(const std::string& path, const YAML::Node& node) {
  return require_scalar(path, node, "a string").Scalar();
}

// A YAML scalar as JSON text (see Loader's map field).
std::string scalar_json(const std::string& path, const YAML::Node& node) {
  if (node.IsNull()) return "null";
  require_scalar(path, node, "a scalar (true/false, a number or a string)");
  const std::string& text = node.Scalar();
  if (node.Tag() != "!") {  // not quoted: YAML's own reading of booleans and numbers
    bool b = false;
    if (YAML::convert<bool>::decode(node, b)) return b ? "true" : "false";
    int64_t i = 0;
    if (YAML::convert<int64_t>::decode(node, i)) return std::to_string(i);
    double d = 0;
    if (YAML::convert<double>::decode(node, d)) {
      if (!std::isfinite(d)) fail(path, "must be a finite number, got '" + text + "'");
      return format_double(d);
    }
  }
  return nlohmann::json(text).dump();
}

template <class E>
E parse_enum_node(const std::string& path, const YAML::Node& node) {
  const std::string text = parse_string(path, node);
  if (auto e = parse_enum<E>(text)) return *e;
  fail(path, "'" + text + "' is not one of " + enum_choices<E>());
}

class Loader {
 public:
  // `given` (optional) collects the path of every key the YAML sets, so later steps can tell a
  // value the user wrote from a default.
  Loader(YAML::Node node, std::string path, std::set<std::string>* given = nullptr)
      : node_(std::move(node)), path_(std::move(path)), given_(given) {
    if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap())
      fail(path_.empty() ? "recipe" : path_, "expected a mapping of keys, got " + describe_node(node_));
  }

  void field(const char* key, int64_t& ref, schema::Range r = schema::any()) {
    if (auto n = take(key)) {
      ref = parse_int(at(key), *n);
      check_range(at(key), static_cast<double>(ref), r, true);
    }
  }
  void field(const char* key, double& ref, schema::Range r = schema::any()) {
    if (auto n = take(key)) {
      ref = parse_double(at(key), *n);
      check_range(at(key), ref, r, false);
    }
  }
  void field(const char* key, bool& ref) {
    if (auto n = take(key)) ref = parse_bool(at(key), *n);
  }
  void field(const char* key, std::string& ref) {
    if (auto n = take(key)) ref = parse_string(at(key), *n);
  }
  template <class E, class = std::enable_if_t<std::is_enum_v<E>>>
  void field(const char* key, E& ref) {
    if (auto n = take(key)) ref = parse_enum_node<E>(at(key), *n);
  }
  template <class T, class... Extra>
  void field(const char* key, std::optional<T>& ref, Extra... extra) {
    auto n = take(key);
    if (!n) return;
    if (n->IsNull()) {
      ref.reset();
      return;
    }
    // Re-dispatch on the plain type through a one-key view of this node.
    T value = ref.value_or(T{});
    YAML::Node one;
    one[key] = *n;
    Loader inner(one, path_, nullptr);
    inner.field(key, value, extra...);
    ref = value;
  }
  void field(const char* key, std::vector<double>& ref, schema::Range r, size_t fixed_len) {
    auto n = take(key);
    if (!n) return;
    if (!n->IsSequence()) fail(at(key), "expected a list of numbers, got " + describe_node(*n));
    if (fixed_len && n->size() != fixed_len)
      fail(at(key), "expected exactly " + std::to_string(fixed_len) + " numbers, got " + std::to_string(n->size()));
    ref.clear();
    for (size_t i = 0; i < n->size(); ++i) {
      const std::string p = at(key) + "[" + std::to_string(i) + "]";
      ref.push_back(parse_double(p, (*n)[i]));
      check_range(p, ref.back(), r, false);
    }
  }
  void field(const char* key, std::vector<int64_t>& ref, schema::Range r) {
    auto n = take(key);
    if (!n) return;
    ref.clear();
    if (n->IsNull()) return;
    if (!n->IsSequence()) fail(at(key), "expected a list of integers, got " + describe_node(*n));
    for (size_t i = 0; i < n->size(); ++i) {
      const std::string p = at(key) + "[" + std::to_string(i) + "]";
      ref.push_back(parse_int(p, (*n)[i]));
      check_range(p, static_cast<double>(ref.back()), r, true);
    }
  }
  void field(const char* key, std::vector<std::string>& ref) {
    auto n = take(key);
    if (!n) return;
    if (n->IsNull()) {
      ref.clear();
      return;
    }
    if (!n->IsSequence()) fail(at(key), "expected a list of strings, got " + describe_node(*n));
    ref.clear();
    for (size_t i = 0; i < n->size(); ++i)
      ref.push_back(parse_string(at(key) + "[" + std::to_string(i) + "]", (*n)[i]));
  }
  // A mapping of names to scalars, each kept as JSON text: a quoted YAML string stays a string,
  // true/false a boolean, a number a number, null null. Nested lists or maps are refused.
  void field(const char* key, std::map<std::string, std::string>& ref) {
    auto n = take(key);
    if (!n) return;
    ref.clear();
    if (n->IsNull()) return;
    if (!n->IsMap()) fail(at(key), "expected a mapping of names to values, got " + describe_node(*n));
    for (const auto& item : *n) {
      const std::string name = parse_string(at(key), item.first);
      const std::string path = at(key) + "." + name;
      if (name == "messages" || name == "add_generation_prompt")
        fail(path, "'" + name + "' is set by tandem for every prompt and cannot be given here");
      ref[name] = scalar_json(path, item.second);
    }
  }
  void choice(const char* key, std::string& ref, const std::vector<std::string>& allowed) {
    auto n = take(key);
    if (!n) return;
    const std::string text = parse_string(at(key), *n);
    if (std::find(allowed.begin(), allowed.end(), text) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : "|") + a;
      fail(at(key), "'" + text + "' is not one of " + list);
    }
    ref = text;
  }
  template <class S>
  void section(const char* key, S& s) {
    declared_.push_back(key);
    Loader inner(node_.IsMap() ? node_[key] : YAML::Node(), at(key), given_);
    schema::visit(inner, s);
    inner.finish();
  }

  // Every key present must have been declared by the schema.
  void finish() const {
    if (!node_.IsMap()) return;
    for (const auto& kv : node_) {
      const std::string key = kv.first.as<std::string>();
      if (std::find(declared_.begin(), declared_.end(), key) != declared_.end()) continue;
      std::string best;
      size_t best_d = SIZE_MAX;
      for (const auto& d : declared_) {
        size_t dist = edit_distance(key, d);
        if (dist < best_d) best_d = dist, best = d;
      }
      if (best_d <= std::max<size_t>(2, key.size() / 3)) fail(at(key), "unknown key; did you mean " + best + "?");
      std::string list;
      for (const auto& d : declared_) list += (list.empty() ? "" : ", ") + d;
      fail(at(key), "unknown key; valid keys here: " + list);
    }
  }

 private:
  std::optional<YAML::Node> take(const char* key) {
    declared_.push_back(key);
    if (!node_.IsMap()) return std::nullopt;
    YAML::Node n = node_[key];
    if (!n.IsDefined()) return std::nullopt;
    if (given_) given_->insert(at(key));
    return n;
  }
  std::string at(const std::string& key) const { return join_path(path_, key); }

  YAML::Node node_;
  std::string path_;
  std::set<std::string>* given_;
  std::vector<std::string> declared_;
};

class Dumper {
 public:
  explicit Dumper(YAML::Emitter& out) : out_(out) {}

  void field(const char* key, int64_t& ref, schema::Range = {}) { out_ << YAML::Key << key << YAML::Value << ref; }
  void field(const char* key, double& ref, schema::Range = {}) {
    out_ << YAML::Key << key << YAML::Value << format_double(ref);
  }
  void field(const char* key, bool& ref) { out_ << YAML::Key << key << YAML::Value << (ref ? "true" : "false"); }
  void field(const char* key, std::string& ref) {
    out_ << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << ref;
  }
  template <class E, class = std::enable_if_t<std::is_enum_v<E>>>
  void field(const char* key, E& ref) {
    out_ << YAML::Key << key << YAML::Value << to_string(ref);
  }
  template <class T, class... Extra>
  void field(const char* key, std::optional<T>& ref, Extra... extra) {
    if (!ref) {
      out_ << YAML::Key << key << YAML::Value << YAML::Null;
      return;
    }
    T value = *ref;
    field(key, value, extra...);
  }
  void field(const char* key, std::vector<double>& ref, schema::Range, size_t) {
    out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (double x : ref) out_ << format_double(x);
    out_ << YAML::EndSeq;
  }
  void field(const char* key, std::vector<int64_t>& ref, schema::Range) {
    out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (int64_t x : ref) out_ << x;
    out_ << YAML::EndSeq;
  }
  void field(const char* key, std::vector<std::string>& ref) {
    out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const auto& s : ref) out_ << YAML::DoubleQuoted << s;
    out_ << YAML::EndSeq;
  }
  void field(const char* key, std::map<std::string, std::string>& ref) {
    out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (const auto& [name, text] : ref) {
      out_ << YAML::Key << name << YAML::Value;
      const nlohmann::json v = nlohmann::json::parse(text);
      if (v.is_string())
        out_ << YAML::DoubleQuoted << v.get<std::string>();
      else if (v.is_null())
        out_ << YAML::Null;
      else if (v.is_boolean())
        out_ << (v.get<bool>() ? "true" : "false");
      else
        out_ << text;  // a number, in the shortest form that reads back the same
    }
    out_ << YAML::EndMap;
  }
  void choice(const char* key, std::string& ref, const std::vector<std::string>&) { field(key, ref); }
  template <class S>
  void section(const char* key, S& s) {
    out_ << YAML::Key << key << YAML::Value << YAML::BeginMap;
    schema::visit(*this, s);
    out_ << YAML::EndMap;
  }

 private:
  YAML::Emitter& out_;
};

}  // namespace

// Defined here (not in config.cpp) because only the walkers know YAML::Node.
Config config_from_yaml_node(const YAML::Node& root, std::set<std::string>* given) {
  Config config;
  Loader loader(root, "", given);
  schema::visit(loader, config);
  loader.finish();
  return config;
}

std::string to_yaml(const Config& config) {
  Config copy = config;  // the walkers take non-const refs so one visit() serves both ways
  YAML::Emitter out;
  out << YAML::BeginMap;
  Dumper dumper(out);
  schema::visit(dumper, copy);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1] ? 1 : 0)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string unknown_name_message(const std::string& what, const std::string& name,
                                 const std::vector<std::string>& names) {
  std::string list, nearest;
  size_t best = std::string::npos;
  for (const auto& n : names) {
    list += (list.empty() ? "" : "|") + n;
    const size_t d = edit_distance(name, n);
    if (d < best) best = d, nearest = n;
  }
  std::string msg = "unknown " + what + " '" + name + "'; expected one of " + list;
  if (best <= 2) msg += " (did you mean " + nearest + "?)";
  return msg;
}

}  // namespace tandem
