// What the safetensors reader / writer and the Hugging Face directory code share: their error
// form, printable names, strict JSON and atomic writes. Internal to models/.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace at {
class Tensor;
}  // namespace at

namespace tandem::models::detail {

// UserError "<path>: <what>".
[[noreturn]] void fail(const std::string& path, const std::string& what);

// Names and parser messages come from the file: one printable line of at most max_len bytes.
std::string printable(const std::string& s, size_t max_len = 120);

// JSON with the rules the format adds: duplicate keys are an error (nlohmann keeps the last one
// silently) and, when max_depth >= 0, containers may not start at depth >= max_depth.
nlohmann::json parse_strict_json(const char* begin, const char* end, const std::string& path, int max_depth);

// Throws what save_safetensors would for tensor `name` (a reserved or non-UTF-8 name, an
// undefined or non-dense tensor, a dtype safetensors lacks), before anything is written.
void check_savable(const std::string& path, const std::string& name, const at::Tensor& t);

// Writes path + ".tmp", fsyncs it and renames it over path: the old file or the whole new one.
void write_text_atomically(const std::string& path, const std::string& text);

}  // namespace tandem::models::detail
