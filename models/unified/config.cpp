// UnifiedConfig checks and its config.json mapping (strict: every key known, every type exact).
#include "models/unified/config.h"

#include <cmath>
#include <set>
#include <stdexcept>

#include "common/error.h"
#include "models/llama/config.h"

namespace tandem::models {

namespace {

void require(bool ok, const std::string& field, const std::string& what) {
  if (!ok) throw std::invalid_argument("UnifiedConfig: " + field + " " + what);
}

void require_positive(const char* field, int64_t v) {
  require(v > 0, field, "must be positive, got " + std::to_string(v));
}

const char* const kIntFields[] = {"vocab_size",   "hidden_size", "num_layers", "num_heads", "intermediate_size",
                                  "max_text_len", "image_size",  "channels",   "patch_size"};
const char* const kFloatFields[] = {"rope_theta", "rms_eps"};

int64_t* int_field(UnifiedConfig& c, const std::string& key) {
  if (key == "vocab_size") return &c.vocab_size;
  if (key == "hidden_size") return &c.hidden_size;
  if (key == "num_layers") return &c.num_layers;
  if (key == "num_heads") return &c.num_heads;
  if (key == "intermediate_size") return &c.intermediate_size;
  if (key == "max_text_len") return &c.max_text_len;
  if (key == "image_size") return &c.image_size;
  if (key == "channels") return &c.channels;
  return &c.patch_size;
}

}  // namespace

void UnifiedConfig::validate() const {
  require_positive("vocab_size", vocab_size);
  require_positive("hidden_size", hidden_size);
  require_positive("num_layers", num_layers);
  require_positive("num_heads", num_heads);
  require_positive("intermediate_size", intermediate_size);
  require_positive("max_text_len", max_text_len);
  require_positive("image_size", image_size);
  require_positive("channels", channels);
  require_positive("patch_size", patch_size);
  require(hidden_size % num_heads == 0, "num_heads",
          std::to_string(num_heads) + " does not divide hidden_size " + std::to_string(hidden_size));
  require(head_dim() % 2 == 0, "num_heads",
          std::to_string(num_heads) + " gives an odd head_dim " + std::to_string(head_dim()) + " (RoPE needs even)");
  require(image_size % patch_size == 0, "patch_size",
          std::to_string(patch_size) + " does not divide image_size " + std::to_string(image_size));
  require(std::isfinite(rope_theta) && rope_theta > 0, "rope_theta",
          "must be positive, got " + std::to_string(rope_theta));
  require(std::isfinite(rms_eps) && rms_eps > 0, "rms_eps", "must be positive, got " + std::to_string(rms_eps));
}

nlohmann::json to_json(const UnifiedConfig& c, torch::ScalarType dtype) {
  return {
      {"model_type", kUnifiedModelType},    {"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
      {"num_layers", c.num_layers},         {"num_heads", c.num_heads},   {"intermediate_size", c.intermediate_size},
      {"max_text_len", c.max_text_len},     {"rope_theta", c.rope_theta}, {"rms_eps", c.rms_eps},
      {"image_size", c.image_size},         {"channels", c.channels},     {"patch_size", c.patch_size},
      {"torch_dtype", hf_dtype_name(dtype)}};
}

UnifiedConfig unified_config_from_json(const nlohmann::json& j, const std::string& source) {
  const auto fail = [&](const std::string& key, const std::string& what) {
    throw UserError(source + ": " + key + " " + what);
  };
  if (!j.is_object()) fail("(root)", "must be a JSON object");
  if (!j.contains("model_type") || j.at("model_type") != kUnifiedModelType)
    fail("model_type", std::string("must be \"") + kUnifiedModelType + "\"");
  std::set<std::string> known{"model_type", "torch_dtype"};
  UnifiedConfig c;
  for (const char* key : kIntFields) {
    known.insert(key);
    if (!j.contains(key)) fail(key, "is missing");
    if (!j.at(key).is_number_integer()) fail(key, "must be an integer");
    *int_field(c, key) = j.at(key).get<int64_t>();
  }
  for (const char* key : kFloatFields) {
    known.insert(key);
    if (!j.contains(key)) fail(key, "is missing");
    if (!j.at(key).is_number()) fail(key, "must be a number");
    (std::string(key) == "rope_theta" ? c.rope_theta : c.rms_eps) = j.at(key).get<double>();
  }
  for (const auto& item : j.items())
    if (known.count(item.key()) == 0) fail(item.key(), "is not a UnifiedConfig key");
  c.validate();
  return c;
}

}  // namespace tandem::models
