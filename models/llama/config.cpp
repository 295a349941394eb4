// HF config.json <-> LlamaConfig, strict about every field it reads and every feature it lacks.
#include "models/llama/config.h"

#include <algorithm>
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

void set_hf_dtype(nlohmann::json& config, torch::ScalarType dtype) {
  bool set = false;
  for (const char* key : {"dtype", "torch_dtype"})
    if (config.contains(key)) {
      config[key] = hf_dtype_name(dtype);
      set = true;
    }
  if (!set) config["torch_dtype"] = hf_dtype_name(dtype);
}

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
  if (block == DecoderBlock::kGemma3 && sliding_window <= 0)
    throw UserError("llama config: the Gemma 3 block needs a sliding_window (the window of its local layers)");
  if (block == DecoderBlock::kGemma3 && rope_scaling.kind != RopeScalingKind::kNone && rope_local_theta == 0)
    throw UserError(
        "llama config: a Gemma 3 block with rope_scaling needs rope_local_theta (its local layers are not rescaled)");
  for (const int64_t l : full_attention_layers)
    if (l < 0 || l >= num_layers)
      throw UserError("llama config: full_attention_layers names layer " + std::to_string(l) + " of " +
                      std::to_string(num_layers));
  if ((!full_attention_layers.empty() || rope_local_theta != 0) && sliding_window <= 0)
    throw UserError("llama config: full_attention_layers and rope_local_theta need a sliding_window");
  if (rope_local_theta < 0 || query_pre_attn_scalar < 0 || !std::isfinite(rope_local_theta) ||
      !std::isfinite(query_pre_attn_scalar))
    throw UserError("llama config: rope_local_theta and query_pre_attn_scalar must be positive (0: unset)");
}

bool LlamaConfig::layer_sliding(int64_t i) const {
  if (sliding_window <= 0) return false;
  return std::find(full_attention_layers.begin(), full_attention_layers.end(), i) == full_attention_layers.end();
}

bool LlamaConfig::mixed_layers() const {
  if (sliding_window <= 0) return false;
  bool any_sliding = false, any_full = false;
  for (int64_t i = 0; i < num_layers; ++i) (layer_sliding(i) ? any_sliding : any_full) = true;
  return any_sliding && (any_full || rope_local_theta > 0);
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

namespace {

// Gemma 3's own fields: the window and which layers use it (layer_types, or the older
// sliding_window_pattern: every pattern-th layer is global), the two RoPE bases (transformers 5's
// rope_parameters per layer type; before, rope_theta + rope_scaling for the global layers and
// rope_local_base_freq for the local ones), query_pre_attn_scalar. Defaults are transformers'.
void gemma3_fields(const nlohmann::json& j, const Fields& f, const std::string& source, LlamaConfig& c) {
  c.block = DecoderBlock::kGemma3;
  if (j.contains("sliding_window") && j.at("sliding_window").is_null())
    f.fail("sliding_window", "must be an integer (Gemma 3's local layers have a window)");
  c.sliding_window = f.integer("sliding_window", 4096);
  if (c.sliding_window < 1 || c.sliding_window > kMaxDimension) f.fail("sliding_window", "is out of range");
  if (f.has("layer_types")) {
    const nlohmann::json& t = j.at("layer_types");
    if (!t.is_array() || static_cast<int64_t>(t.size()) != c.num_layers)
      f.fail("layer_types", "must list one type per layer (" + std::to_string(c.num_layers) + ")");
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string s = t[i].is_string() ? t[i].get<std::string>() : t[i].dump();
      if (s == "full_attention")
        c.full_attention_layers.push_back(static_cast<int64_t>(i));
      else if (s != "sliding_attention")
        f.fail("layer_types", "has '" + s + "': full_attention or sliding_attention");
    }
  } else {
    const char* key = f.has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    const int64_t pattern = f.integer(key, 6);
    if (pattern < 1) f.fail(key, "must be positive");
    for (int64_t i = 0; i < c.num_layers; ++i)
      if ((i + 1) % pattern == 0) c.full_attention_layers.push_back(i);
  }
  c.query_pre_attn_scalar = f.number("query_pre_attn_scalar", 256.0);
  if (!(c.query_pre_attn_scalar > 0) || !std::isfinite(c.query_pre_attn_scalar))
    f.fail("query_pre_attn_scalar", "must be a positive number");
  const bool v5 = f.has("rope_parameters") && !f.has("rope_scaling");
  if (!v5) {
    c.rope_theta = f.number("rope_theta", 1000000.0);
    c.rope_local_theta = f.number("rope_local_base_freq", 10000.0);
    c.rope_scaling = rope_scaling_from_hf(j, source);
    return;
  }
  const nlohmann::json& p = j.at("rope_parameters");
  if (!p.is_object()) f.fail("rope_parameters", "must be an object");
  auto part = [&](const char* type) {  // {"rope_parameters": its object}, for rope_scaling_from_hf
    nlohmann::json one = nlohmann::json::object();
    if (p.contains(type) && !p.at(type).is_null()) {
      if (!p.at(type).is_object()) f.fail(std::string("rope_parameters.") + type, "must be an object");
      one["rope_parameters"] = p.at(type);
    }
    return one;
  };
  const nlohmann::json global = part("full_attention"), local = part("sliding_attention");
  c.rope_scaling = rope_scaling_from_hf(global, source + ": rope_parameters.full_attention");
  if (rope_scaling_from_hf(local, source + ": rope_parameters.sliding_attention").kind != RopeScalingKind::kNone)
    f.fail("rope_parameters.sliding_attention", "must be rope_type default (the local layers are not rescaled)");
  auto theta = [&](const nlohmann::json& one, double fallback) {
    if (!one.contains("rope_parameters")) return fallback;
    return Fields(one.at("rope_parameters"), source + ": rope_parameters").number("rope_theta", fallback);
  };
  c.rope_theta = theta(global, 1000000.0);
  c.rope_local_theta = theta(local, 10000.0);
  if (!(c.rope_local_theta > 0) || !std::isfinite(c.rope_local_theta))
    f.fail("rope_parameters.sliding_attention.rope_theta", "must be positive");
}

}  // namespace

LlamaConfig from_hf_config(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw UserError(source + ": not a JSON object");
  const Fields f(j, source);
  const std::string type = f.string("model_type", "");
  if (type == "gemma3")
    f.fail("model_type",
           "'gemma3' is Gemma3ForConditionalGeneration (image and text), which is not supported; tandem trains the "
           "text-only Gemma3ForCausalLM (model_type gemma3_text, e.g. gemma-3-1b)");
  if (type != "llama" && type != "qwen2" && type != "qwen3" && type != "mistral" && type != "gemma3_text")
    f.fail("model_type", "'" + type + "' is not supported (llama, mistral, qwen2, qwen3 or gemma3_text)");
  const bool gemma = type == "gemma3_text";
  if (gemma) {
    // transformers' Gemma 3 reads hidden_activation; an older spelling is hidden_act.
    const char* act = f.has("hidden_activation") ? "hidden_activation" : "hidden_act";
    if (f.string(act, "gelu_pytorch_tanh") != "gelu_pytorch_tanh") f.fail(act, "must be gelu_pytorch_tanh");
    if (f.boolean("attention_bias", false)) f.fail("attention_bias", "is not supported (o_proj bias)");
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
      if (f.has(key)) f.fail(key, "is not supported (Gemma 2's soft-capping; Gemma 3 has none): must be null");
    if (f.boolean("use_bidirectional_attention", false))
      f.fail("use_bidirectional_attention", "is not supported (an embedding model, not a causal LM)");
  } else if (f.string("hidden_act", "silu") != "silu") {
    f.fail("hidden_act", "must be silu");
  }
  if (f.boolean("mlp_bias", false)) f.fail("mlp_bias", "is not supported");
  if ((type == "llama" || type == "mistral") && f.boolean("attention_bias", false))
    f.fail("attention_bias", "is not supported (o_proj bias)");
  if ((type == "qwen2" || type == "qwen3") && f.boolean("use_sliding_window", false))
    f.fail("use_sliding_window", "is not supported (Qwen's sliding-window layers)");
  if (!gemma && j.contains("layer_types") && j.at("layer_types").is_array())
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
  if (gemma) {
    gemma3_fields(j, f, source, c);
  } else if (!f.has("rope_theta") && j.contains("rope_parameters") && j.at("rope_parameters").is_object()) {
    const Fields rope(j.at("rope_parameters"), source + ": rope_parameters");
    c.rope_theta = rope.number("rope_theta", 10000.0);
  }
  c.rms_eps = f.number("rms_norm_eps", 1e-6);
  c.tie_embeddings = f.boolean("tie_word_embeddings", gemma);  // Gemma 3 ties by default
  // Qwen2 always has q/k/v biases; Qwen3 has them only with attention_bias (none of the released).
  c.qkv_bias = type == "qwen2" || (type == "qwen3" && f.boolean("attention_bias", false));
  c.qk_norm = type == "qwen3" || gemma;
  c.initializer_range = f.number("initializer_range", 0.02);
  // Mistral's window (null: none); Qwen2 writes one too, but applies it only with use_sliding_window.
  if (type == "mistral" && j.contains("sliding_window") && !j.at("sliding_window").is_null())
    c.sliding_window = dim("sliding_window");
  if (f.has("head_dim") && !j.at("head_dim").is_null()) {
    const int64_t hd = dim("head_dim");
    // Stored only when it departs from the default, so a config that spells out the default
    // head_dim resolves to the same LlamaConfig as one that leaves it out.
    if (hd != c.hidden_size / c.num_heads || c.hidden_size % c.num_heads != 0) c.explicit_head_dim = hd;
  } else if (gemma && (c.hidden_size % c.num_heads != 0 || c.hidden_size / c.num_heads != 256)) {
    c.explicit_head_dim = 256;  // transformers' Gemma 3 default
  }
  if (!gemma) c.rope_scaling = rope_scaling_from_hf(j, source);
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
  const bool gemma = c.block == DecoderBlock::kGemma3;
  const bool qwen3 = !gemma && c.qk_norm, qwen2 = !gemma && !qwen3 && c.qkv_bias;
  nlohmann::json j = base.is_object() ? base : nlohmann::json::object();
  // Mistral is the Llama layout plus the window; a Mistral without one (v0.2 on) stays Mistral.
  const bool mistral = !gemma && !qwen3 && !qwen2 &&
                       (c.sliding_window > 0 || (j.contains("model_type") && j.at("model_type") == "mistral"));
  const nlohmann::json arch = {
      {"architectures",
       {gemma     ? "Gemma3ForCausalLM"
        : qwen3   ? "Qwen3ForCausalLM"
        : qwen2   ? "Qwen2ForCausalLM"
        : mistral ? "MistralForCausalLM"
                  : "LlamaForCausalLM"}},
      {"model_type", gemma     ? "gemma3_text"
                     : qwen3   ? "qwen3"
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
      {gemma ? "hidden_activation" : "hidden_act", gemma ? "gelu_pytorch_tanh" : "silu"},
      {"initializer_range", c.initializer_range},
  };
  // The base's spelling is kept: transformers 5 writes dtype and rope_parameters, older versions
  // torch_dtype, rope_theta and rope_scaling; both versions read either.
  const bool v5 = j.contains("rope_parameters") && !j.contains("rope_scaling");
  set_hf_dtype(j, dtype);
  for (const auto& [key, value] : arch.items()) j[key] = value;
  if (c.explicit_head_dim > 0 || gemma)  // Gemma 3's default head_dim (256) is not hidden / heads
    j["head_dim"] = c.head_dim();
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
  const double local_theta = c.rope_local_theta > 0 ? c.rope_local_theta : c.rope_theta;
  if (v5 && gemma) {
    s["rope_theta"] = c.rope_theta;
    j["rope_parameters"] = {{"full_attention", s},
                            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", local_theta}}}};
  } else if (v5) {
    s["rope_theta"] = c.rope_theta;
    j["rope_parameters"] = s;
  } else {
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = r.kind == RopeScalingKind::kNone ? nlohmann::json(nullptr) : s;
    if (gemma) j["rope_local_base_freq"] = local_theta;
  }
  if (gemma) {
    j["sliding_window"] = c.sliding_window;
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < c.num_layers; ++i)
      types.push_back(c.layer_sliding(i) ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    // transformers' Gemma3TextConfig types it int (strictly): an integral value is written as one.
    const double scalar = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<double>(c.head_dim());
    j["query_pre_attn_scalar"] = scalar == std::floor(scalar) && scalar < 1e15
                                     ? nlohmann::json(static_cast<int64_t>(scalar))
                                     : nlohmann::json(scalar);
    j["attention_bias"] = false;
    j["attn_logit_softcapping"] = nullptr;
    j["final_logit_softcapping"] = nullptr;
    j["use_bidirectional_attention"] = false;
    for (const char* key : {"hidden_act", "mlp_bias", "sliding_window_pattern", "_sliding_window_pattern"})
      j.erase(key);
  } else if (qwen3) {
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
