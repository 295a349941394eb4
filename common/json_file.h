// A JSON object read from a file (a Hugging Face config, an adapter config, a checkpoint's
// sidecars): a missing, unreadable, malformed or non-object file is one named error, not a parse
// exception's offset or a later type error far from the file. Header-only so every layer can use it.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"

namespace tandem {

// Throws UserError "<path>: not a JSON object" (or "cannot read <path>") plus `what_to_do` when given.
inline nlohmann::json read_json_object(const std::string& path, const std::string& what_to_do = "") {
  const std::string tail = what_to_do.empty() ? "" : "; " + what_to_do;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot read " + path + tail);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw UserError(path + ": not a JSON object" + tail);
  return j;
}

}  // namespace tandem
