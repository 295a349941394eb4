// The model directory wins: its config.json is read once here and written into the recipe, so
// every later step (validation, recipe.yaml, resume, ckpt info) sees the architecture it trains.
#include "core/config/model_dir.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "common/error.h"
#include "common/json_file.h"
#include "common/write_file.h"
#include "models/llama/config.h"
#include "models/safetensors.h"

namespace fs = std::filesystem;

namespace tandem {

namespace {

// config.json / generation_config.json spell a token id as an int, a list of ints, or null.
void add_ids(const nlohmann::json& value, const std::string& where, std::vector<int64_t>& out) {
  if (value.is_null()) return;
  auto add = [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      throw UserError(where + " must be a non-negative integer or a list of them, got " + v.dump());
    const int64_t id = v.get<int64_t>();
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  };
  if (value.is_array()) {
    for (const auto& v : value) add(v);
  } else {
    add(value);
  }
}

RopeType rope_type(models::RopeScalingKind k) {
  switch (k) {
    case models::RopeScalingKind::kLinear:
      return RopeType::kLinear;
    case models::RopeScalingKind::kLlama3:
      return RopeType::kLlama3;
    default:
      return RopeType::kNone;
  }
}

template <class T>
std::string show(const T& v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}
std::string show(bool v) { return v ? "true" : "false"; }
std::string show(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}
std::string show(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "null"; }

}  // namespace

ModelDir read_model_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UserError(dir +
                    ": no such directory (tracks.ar.model.hf_dir names a Hugging Face model directory: "
                    "config.json + safetensors)");
  const std::string config_path = (fs::path(dir) / models::kHfConfigFile).string();
  if (fs::exists(config_path, ec) && !fs::is_regular_file(config_path, ec))
    throw UserError(config_path + ": not a regular file");
  ModelDir d;
  d.dir = dir;
  d.config = models::read_hf_config(dir);
  const models::LlamaConfig c = models::from_hf_config(d.config, config_path);
  ArModelConfig& m = d.model;
  m.hf_dir = dir;
  m.arch = ArArch::kLlama;
  m.vocab_size = c.vocab_size;
  m.hidden_size = c.hidden_size;
  m.num_layers = c.num_layers;
  m.num_heads = c.num_heads;
  m.num_kv_heads = c.num_kv_heads;
  m.intermediate_size = c.intermediate_size;
  m.max_seq_len = c.max_seq_len;
  m.rope_theta = c.rope_theta;
  m.rms_eps = c.rms_eps;
  m.tie_embeddings = c.tie_embeddings;
  m.qkv_bias = c.qkv_bias;
  m.qk_norm = c.qk_norm;
  m.head_dim = c.head_dim();
  m.sliding_window = c.sliding_window > 0 ? std::optional<int64_t>(c.sliding_window) : std::nullopt;
  m.full_attention_layers = c.full_attention_layers;
  if (c.rope_local_theta > 0) m.rope_local_theta = c.rope_local_theta;
  m.block = c.block == models::DecoderBlock::kGemma3 ? ArBlock::kGemma3 : ArBlock::kLlama;
  if (c.query_pre_attn_scalar > 0) m.query_pre_attn_scalar = c.query_pre_attn_scalar;
  m.rope_scaling.type = rope_type(c.rope_scaling.kind);
  m.rope_scaling.factor = c.rope_scaling.factor;
  m.rope_scaling.low_freq_factor = c.rope_scaling.low_freq_factor;
  m.rope_scaling.high_freq_factor = c.rope_scaling.high_freq_factor;
  m.rope_scaling.original_max_seq_len = c.rope_scaling.original_max_seq_len;
  if (d.config.contains("bos_token_id") && !d.config.at("bos_token_id").is_null()) {
    std::vector<int64_t> bos;
    add_ids(d.config.at("bos_token_id"), config_path + ": bos_token_id", bos);
    if (bos.size() == 1) m.bos_token_id = bos[0];
  }
  if (d.config.contains("eos_token_id"))
    add_ids(d.config.at("eos_token_id"), config_path + ": eos_token_id", m.eos_token_ids);
  const fs::path gen = fs::path(dir) / "generation_config.json";
  if (fs::exists(gen, ec)) {
    if (!fs::is_regular_file(gen, ec)) throw UserError(gen.string() + ": not a regular file");
    d.generation_config = read_json_object(gen.string());
    if (d.generation_config.contains("eos_token_id"))
      add_ids(d.generation_config.at("eos_token_id"), gen.string() + ": eos_token_id", m.eos_token_ids);
    if (!m.bos_token_id && d.generation_config.contains("bos_token_id")) {
      std::vector<int64_t> bos;
      add_ids(d.generation_config.at("bos_token_id"), gen.string() + ": bos_token_id", bos);
      if (bos.size() == 1) m.bos_token_id = bos[0];
    }
  }
  for (const int64_t id : m.eos_token_ids)
    if (id >= m.vocab_size)
      throw UserError(dir + ": eos token id " + std::to_string(id) + " is outside the vocabulary of " +
                      std::to_string(m.vocab_size));
  return d;
}

void resolve_model_dir(Config& config, const std::set<std::string>& given) {
  ArTrackConfig& ar = config.tracks.ar;
  if (!ar.enabled || !ar.model.hf_dir || ar.model.arch != ArArch::kLlama) return;
  const std::string dir = *ar.model.hf_dir;
  const ModelDir d = read_model_dir(dir);
  const ArModelConfig& truth = d.model;
  ArModelConfig& m = ar.model;
  const std::string base = "tracks.ar.model.";
  auto agree = [&](const std::string& key, const auto& recipe, const auto& model) {
    if (!given.count(base + key) || recipe == model) return;
    throw UserError(base + key + ": the recipe says " + show(recipe) + " but " + dir + "/config.json says " +
                    show(model) +
                    "; with hf_dir the model directory is the source of truth: remove the key or "
                    "make it agree");
  };
  agree("vocab_size", m.vocab_size, truth.vocab_size);
  agree("hidden_size", m.hidden_size, truth.hidden_size);
  agree("num_layers", m.num_layers, truth.num_layers);
  agree("num_heads", m.num_heads, truth.num_heads);
  agree("num_kv_heads", m.num_kv_heads, truth.num_kv_heads);
  agree("intermediate_size", m.intermediate_size, truth.intermediate_size);
  agree("rope_theta", m.rope_theta, truth.rope_theta);
  agree("rms_eps", m.rms_eps, truth.rms_eps);
  agree("tie_embeddings", m.tie_embeddings, truth.tie_embeddings);
  agree("qkv_bias", m.qkv_bias, truth.qkv_bias);
  agree("qk_norm", m.qk_norm, truth.qk_norm);
  if (m.head_dim) agree("head_dim", m.head_dim, truth.head_dim);
  if (m.sliding_window || truth.sliding_window)
    agree("sliding_window", m.sliding_window.value_or(0), truth.sliding_window.value_or(0));
  agree("full_attention_layers", m.full_attention_layers, truth.full_attention_layers);
  if (m.rope_local_theta || truth.rope_local_theta)
    agree("rope_local_theta", m.rope_local_theta.value_or(0), truth.rope_local_theta.value_or(0));
  agree("block", std::string(to_string(m.block)), std::string(to_string(truth.block)));
  if (m.query_pre_attn_scalar || truth.query_pre_attn_scalar)
    agree("query_pre_attn_scalar", m.query_pre_attn_scalar.value_or(0), truth.query_pre_attn_scalar.value_or(0));
  agree("rope_scaling.type", std::string(to_string(m.rope_scaling.type)),
        std::string(to_string(truth.rope_scaling.type)));
  agree("rope_scaling.factor", m.rope_scaling.factor, truth.rope_scaling.factor);
  agree("rope_scaling.low_freq_factor", m.rope_scaling.low_freq_factor, truth.rope_scaling.low_freq_factor);
  agree("rope_scaling.high_freq_factor", m.rope_scaling.high_freq_factor, truth.rope_scaling.high_freq_factor);
  agree("rope_scaling.original_max_seq_len", m.rope_scaling.original_max_seq_len,
        truth.rope_scaling.original_max_seq_len);
  agree("bos_token_id", m.bos_token_id, truth.bos_token_id);
  agree("eos_token_ids", m.eos_token_ids, truth.eos_token_ids);
  const bool capped = given.count(base + "max_seq_len") > 0;
  if (capped && m.max_seq_len > truth.max_seq_len)
    throw UserError(base + "max_seq_len: " + std::to_string(m.max_seq_len) + " exceeds the model's context of " +
                    std::to_string(truth.max_seq_len) + " tokens (" + dir +
                    "/config.json max_position_embeddings); lower it or remove the key");
  const int64_t max_seq_len = capped ? m.max_seq_len : truth.max_seq_len;
  m = truth;
  m.max_seq_len = max_seq_len;
  if (!given.count("tracks.ar.tokenizer.kind")) ar.tokenizer.kind = TokenizerKind::kHf;
  if (ar.tokenizer.kind == TokenizerKind::kHf && !ar.tokenizer.path) ar.tokenizer.path = dir;
}

}  // namespace tandem

namespace tandem {

namespace {

void write_json_file(const fs::path& path, const nlohmann::json& j) {
  write_file_checked(path.string(), j.dump(2) + "\n");
}

nlohmann::json ids_json(const std::vector<int64_t>& ids) {
  if (ids.size() == 1) return ids[0];
  return ids;
}

}  // namespace

void complete_hf_dir(const std::string& dir, const HfDirCompanions& c) {
  const fs::path out = dir;
  const fs::path config_path = out / models::kHfConfigFile;
  nlohmann::json config = read_json_object(config_path.string());  // what save_llama wrote: the architecture
  if (c.source) {
    nlohmann::json merged = c.source->config;
    for (const auto& [key, value] : config.items()) merged[key] = value;
    // tracks.ar.model.max_seq_len caps training's sequences; the model's context is unchanged.
    if (c.source->config.contains("max_position_embeddings"))
      merged["max_position_embeddings"] = c.source->config.at("max_position_embeddings");
    config = merged;
  }
  if (!c.stop_ids.empty()) config["eos_token_id"] = ids_json(c.stop_ids);
  if (c.bos_id) config["bos_token_id"] = *c.bos_id;
  write_json_file(config_path, config);

  std::error_code ec;
  if (c.tokenizer_path) {
    const fs::path tok = *c.tokenizer_path;
    const fs::path tok_dir = fs::is_directory(tok, ec) ? tok : tok.parent_path();
    const fs::path tok_file = fs::is_directory(tok, ec) ? tok / "tokenizer.json" : tok;
    fs::copy_file(tok_file, out / "tokenizer.json", fs::copy_options::overwrite_existing, ec);
    if (ec)
      throw UserError((out / "tokenizer.json").string() + ": cannot copy " + tok_file.string() + ": " + ec.message());
    for (const char* name :
         {"tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja"}) {
      if (!fs::is_regular_file(tok_dir / name, ec)) continue;
      fs::copy_file(tok_dir / name, out / name, fs::copy_options::overwrite_existing, ec);
      if (ec) throw UserError((out / name).string() + ": cannot copy: " + ec.message());
    }
    if (c.chat_template) {  // the recipe's file; a chat_template.jinja would win over it (transformers 5)
      const fs::path tc = out / "tokenizer_config.json";
      nlohmann::json j = fs::exists(tc, ec) ? read_json_object(tc.string()) : nlohmann::json::object();
      j["chat_template"] = *c.chat_template;
      write_json_file(tc, j);
      fs::remove(out / "chat_template.jinja", ec);
    }
  }
  nlohmann::json gen =
      c.source && c.source->generation_config.is_object() ? c.source->generation_config : nlohmann::json::object();
  if (!c.stop_ids.empty()) gen["eos_token_id"] = ids_json(c.stop_ids);
  if (c.bos_id) gen["bos_token_id"] = *c.bos_id;
  if (!gen.empty()) write_json_file(out / "generation_config.json", gen);
}

}  // namespace tandem
