// A small Jinja2 interpreter of our own for Hugging Face chat templates: it renders byte for byte
// what Python's jinja2 renders under transformers' settings (trim_blocks, lstrip_blocks, loopcontrols).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::models::jinja {

struct TemplateImpl;  // the parsed tree, in jinja_ast.h

// Environment semantics are fixed to what transformers.apply_chat_template uses: an immutable
// sandbox with trim_blocks=True, lstrip_blocks=True, the loopcontrols extension (break / continue),
// the `generation` block of transformers' AssistantTracker (rendered as plain text), globals
// raise_exception / strftime_now / range / namespace / dict and transformers' own `tojson`
// (json.dumps(x, ensure_ascii=False, indent=...)). Nothing is autoescaped.
//
// Every error is a tandem::UserError whose message starts with "<origin>:<line>: ", the line
// being the template's own line: syntax errors and unsupported constructs (an unknown tag, filter
// or test) when parsing, and runtime errors (raise_exception, an undefined value used as an
// object, a type error, an unsupported method) when rendering. As in jinja2, an unknown filter or
// test inside an if-branch fails only if that branch runs. Rendering is const and thread-safe.
class Template {
 public:
  static Template parse(const std::string& source, const std::string& origin);

  // `context` must be an object; its keys become the template's top-level variables. With
  // nlohmann::json the keys of every object arrive sorted; an ordered_json keeps insertion order,
  // which is what `tojson` and printing a dict show, as Python's dicts do.
  std::string render(const nlohmann::json& context) const;
  std::string render(const nlohmann::ordered_json& context) const;

  const std::string& origin() const;

 private:
  explicit Template(std::shared_ptr<const TemplateImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const TemplateImpl> impl_;
};

}  // namespace tandem::models::jinja
