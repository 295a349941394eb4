// HF config.json <-> LlamaConfig, strict about every field it reads and every feature it lacks.
#include "models/llama/config.h"

#include <cmath>

#include "common/error.h"

namespace tandem::models {

namespace {

class Fields {
 public:
  Fields(const nlohmann::json& j, std::string source) : j_(j), source_(std::move(source)) {}

  int64_t integer(const char* key) const {
    const nlohmann::json& v = required(key);
    if (!v.is_number_integer()) fail(key, "must be an integer");
    return v.get<int64_t>();
  }
  int64_t integer(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_number()) fail(key, "must be a number");
    return j_.at(key).get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) fail(key, "must be true or false");
    return j_.at(key).get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_string()) fail(key, "must be a string");
    return j_.at(key).get<std::string>();
  }
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw UserError(source_ + ": " + key + " " + what);
  }

 private:
  const nlohmann::json& required(const char* key) const {
    if (!has(key)) fail(key, "is missing");
    return j_.at(key);
  }
  const nlohmann::json& j_;
  std::string source_;
};

void require_positive(const char* field, int64_t v) {
  if (v <= 0) throw UserError(std::string("llama config: ") + field + " must be positive, got " + std::to_string(v));
}

}  // namespace

const char* hf_dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32:
      return "float32";
    case torch::kFloat64:
      return "float64";
    case torch::kBFloat16:
      return "bfloat16";
    case torch::kFloat16:
      return "float16";
    default:
      throw UserError("llama config: no HF name for dtype " + std::string(c10::toString(dtype)));
  }
}

void LlamaConfig::validate() const {
  require_positive("vocab_size", vocab_size);
  require_positive("hidden_size", hidden_size);
  require_positive("num_layers", num_layers);
  require_positive("num_heads", num_heads);
  require_positive("num_kv_heads", num_kv_heads);
  require_positive("intermediate_size", intermediate_size);
  require_positive("max_seq_len", max_seq_len);
  if (explicit_head_dim == 0 && hidden_size % num_heads != 0)
    throw UserError("llama config: hidden_size " + std::to_string(hidden_size) + " is not a multiple of num_heads " +
                    std::to_string(num_heads));
  if (head_dim() % 2 != 0)
    throw UserError("llama config: head_dim " + std::to_string(head_dim()) + " must be even (RoPE)");
  if (num_heads % num_kv_heads != 0)
    throw UserError("llama config: num_heads " + std::to_string(num_heads) + " is not a multiple of num_kv_heads " +
                    std::to_string(num_kv_heads));
  if (explicit_head_dim < 0) throw UserError("llama config: head_dim must be positive");
  if (rope_scaling.kind != RopeScalingKind::kNone && !(rope_scaling.factor >= 1.0))
    throw UserError("llama config: rope_scaling factor must be >= 1");
  if (!(rope_theta > 0) || !(rms_eps > 0) || !(initializer_range >= 0))
    throw UserError("llama config: rope_theta and rms_eps must be positive, initializer_range non-negative");
}

void LlamaConfig::validate_tp(int64_t tp_size) const {
  if (num_kv_heads % tp_size != 0 || num_heads % tp_size != 0)
    throw UserError("llama: tp " + std::to_string(tp_size) + " must divide num_heads " + std::to_string(num_heads) +
                    " and num_kv_heads " + std::to_string(num_kv_heads));
  if (vocab_size < tp_size || intermediate_size < tp_size)
    throw UserError("llama: tp " + std::to_string(tp_size) + " exceeds vocab_size or intermediate_size");
}

const char* rope_scaling_name(RopeScalingKind kind) {
  switch (kind) {
    case RopeScalingKind::kLinear:
      return "linear";
    case RopeScalingKind::kLlama3:
      return "llama3";
    default:
      return "none";
  }
}

namespace {

// transformers 5 writes rope_parameters (rope_theta and the scaling in one object); older versions
// write rope_theta and rope_scaling at the top level. Either is read; rope_scaling wins when both are.
const char* rope_key(const nlohmann::json& j) {
  if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) return "rope_scaling";
  return "rope_parameters";
}

RopeScaling rope_scaling_from_hf(const nlohmann::json& j, const std::string& source) {
  RopeScaling r;
  const char* key = rope_key(j);
  if (!j.contains(key) || j.at(key).is_null()) return r;
  const nlohmann::json& s = j.at(key);
  if (!s.is_object()) throw UserError(source + ": " + key + " must be an object or null");
  const Fields f(s, source + ": " + key);
  // transformers spells it rope_type since 4.45 and type before.
  const std::string type = f.has("rope_type") ? f.string("rope_type", "") : f.string("type", "default");
  if (type == "default") return r;
  if (type == "linear") {
    r.kind = RopeScalingKind::kLinear;
  } else if (type == "llama3") {
    r.kind = RopeScalingKind::kLlama3;
    r.low_freq_factor = f.number("low_freq_factor", 1.0);
    r.high_freq_factor = f.number("high_freq_factor", 4.0);
    r.original_max_seq_len = f.integer("original_max_position_embeddings");
    if (!(r.high_freq_factor > r.low_freq_factor) || !(r.low_freq_factor > 0) || r.original_max_seq_len <= 0)
      f.fail("", "needs 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0");
  } else {
    f.fail("rope_type", "'" + type + "' is not supported (default, linear or llama3)");
  }
  r.factor = f.number("factor", 1.0);
  if (!(r.factor >= 1.0) || !std::isfinite(r.factor)) f.fail("factor", "must be a finite number >= 1");
  return r;
}

}  // namespace

LlamaConfig from_hf_config(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw UserError(source + ": not a JSON object");
  const Fields f(j, source);
  const std::string type = f.string("model_type", "");
  if (type != "llama" && type != "qwen2" && type != "qwen3" && type != "mistral")
    f.fail("model_type", "'" + type + "' is not supported (llama, mistral, qwen2 or qwen3)");
  if (f.string("hidden_act", "silu") != "silu") f.fail("hidden_act", "must be silu");
  if (f.boolean("mlp_bias", false)) f.fail("mlp_bias", "is not supported");
  if ((type == "llama" || type == "mistral") && f.boolean("attention_bias", false))
    f.fail("attention_bias", "is not supported (o_proj bias)");
  if ((type == "qwen2" || type == "qwen3") && f.boolean("use_sliding_window", false))
    f.fail("use_sliding_window", "is not supported (Qwen's sliding-window layers)");
  if (j.contains("layer_types") && j.at("layer_types").is_array())
    for (const auto& t : j.at("layer_types"))
      if (!t.is_string() || t.get<std::string>() != "full_attention")
        f.fail("layer_types", "has " + t.dump() + ": only full_attention layers are supported");
  // Bounded before anything is sized from them: a damaged or hostile config.json must fail here,
  // not in an allocation.
  auto dim = [&](const char* key, int64_t fallback = -1) {
    const int64_t v = fallback < 0 ? f.integer(key) : f.integer(key, fallback);
    if (v < 1 || v > kMaxDimension)
      f.fail(key, std::to_string(v) + " is out of range; must be in [1, " + std::to_string(kMaxDimension) + "]");
    return v;
  };
  LlamaConfig c;
  c.vocab_size = dim("vocab_size");
  c.hidden_size = dim("hidden_size");
  c.num_layers = dim("num_hidden_layers");
  c.num_heads = dim("num_attention_heads");
  c.num_kv_heads = dim("num_key_value_heads", c.num_heads);
  c.intermediate_size = dim("intermediate_size");
  c.max_seq_len = dim("max_position_embeddings");
  c.rope_theta = f.number("rope_theta", 10000.0);
  if (!f.has("rope_theta") && j.contains("rope_parameters") && j.at("rope_parameters").is_object()) {
    const Fields rope(j.at("rope_parameters"), source + ": rope_parameters");
    c.rope_theta = rope.number("rope_theta", 10000.0);
  }
  c.rms_eps = f.number("rms_norm_eps", 1e-6);
  c.tie_embeddings = f.boolean("tie_word_embeddings", false);
  // Qwen2 always has q/k/v biases; Qwen3 has them only with attention_bias (none of the released).
  c.qkv_bias = type == "qwen2" || (type == "qwen3" && f.boolean("attention_bias", false));
  c.qk_norm = type == "qwen3";
  c.initializer_range = f.number("initializer_range", 0.02);
  // Mistral's window (null: none); Qwen2 writes one too, but applies it only with use_sliding_window.
  if (type == "mistral" && j.contains("sliding_window") && !j.at("sliding_window").is_null())
    c.sliding_window = dim("sliding_window");
  if (f.has("head_dim") && !j.at("head_dim").is_null()) {
    const int64_t hd = dim("head_dim");
    // Stored only when it departs from the default, so a config that spells out the default
    // head_dim resolves to the same LlamaConfig as one that leaves it out.
    if (hd != c.hidden_size / c.num_heads || c.hidden_size % c.num_heads != 0) c.explicit_head_dim = hd;
  }
  c.rope_scaling = rope_scaling_from_hf(j, source);
  if (!std::isfinite(c.rope_theta) || !std::isfinite(c.rms_eps) || !std::isfinite(c.initializer_range))
    f.fail("rope_theta / rms_norm_eps / initializer_range", "must be finite");
  try {
    c.validate();
  } catch (const UserError& e) {
    throw UserError(source + ": " + e.what());
  }
  return c;
}

nlohmann::json to_hf_config(const LlamaConfig& c, torch::ScalarType dtype, const nlohmann::json& base) {
  const bool qwen3 = c.qk_norm, qwen2 = !qwen3 && c.qkv_bias;
  nlohmann::json j = base.is_object() ? base : nlohmann::json::object();
  // Mistral is the Llama layout plus the window; a Mistral without one (v0.2 on) stays Mistral.
  const bool mistral =
      !qwen3 && !qwen2 && (c.sliding_window > 0 || (j.contains("model_type") && j.at("model_type") == "mistral"));
  const nlohmann::json arch = {
      {"architectures",
       {qwen3     ? "Qwen3ForCausalLM"
        : qwen2   ? "Qwen2ForCausalLM"
        : mistral ? "MistralForCausalLM"
                  : "LlamaForCausalLM"}},
      {"model_type", qwen3     ? "qwen3"
                     : qwen2   ? "qwen2"
                     : mistral ? "mistral"
                               : "llama"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_layers},
      {"num_attention_heads", c.num_heads},
      {"num_key_value_heads", c.num_kv_heads},
      {"max_position_embeddings", c.max_seq_len},
      {"rms_norm_eps", c.rms_eps},
      {"tie_word_embeddings", c.tie_embeddings},
      {"hidden_act", "silu"},
      {"initializer_range", c.initializer_range},
  };
  // The base's spelling is kept: transformers 5 writes dtype and rope_parameters, older versions
  // torch_dtype, rope_theta and rope_scaling; both versions read either.
  const bool v5 = j.contains("rope_parameters") && !j.contains("rope_scaling");
  j[j.contains("dtype") && !j.contains("torch_dtype") ? "dtype" : "torch_dtype"] = hf_dtype_name(dtype);
  for (const auto& [key, value] : arch.items()) j[key] = value;
  if (c.explicit_head_dim > 0)
    j["head_dim"] = c.explicit_head_dim;
  else if (j.contains("head_dim"))
    j["head_dim"] = c.head_dim();
  const RopeScaling& r = c.rope_scaling;
  nlohmann::json s = {{"rope_type", r.kind == RopeScalingKind::kNone ? "default" : rope_scaling_name(r.kind)}};
  if (r.kind != RopeScalingKind::kNone) s["factor"] = r.factor;
  if (r.kind == RopeScalingKind::kLlama3) {
    s["low_freq_factor"] = r.low_freq_factor;
    s["high_freq_factor"] = r.high_freq_factor;
    s["original_max_position_embeddings"] = r.original_max_seq_len;
  }
  if (v5) {
    s["rope_theta"] = c.rope_theta;
    j["rope_parameters"] = s;
  } else {
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = r.kind == RopeScalingKind::kNone ? nlohmann::json(nullptr) : s;
  }
  if (qwen3) {
    if (!j.contains("use_sliding_window")) j["use_sliding_window"] = false;
    j["attention_bias"] = c.qkv_bias;
    j.erase("mlp_bias");
  } else if (qwen2) {
    if (!j.contains("use_sliding_window")) j["use_sliding_window"] = false;
  } else if (mistral) {
    j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
    j.erase("attention_bias");
    j.erase("mlp_bias");
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  return j;
}

}  // namespace tandem::models
