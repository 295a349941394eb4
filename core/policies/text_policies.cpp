// The table behind text_policy_spec(): one entry per ArArch, each a few plain functions.
#include "core/policies/text_policies.h"

#include "common/error.h"
#include "core/config/name_tables.h"
#include "core/policies/llama_policy.h"
#include "core/policies/unified_policy.h"
#include "models/llama/weights.h"
#include "models/unified/weights.h"

namespace tandem {

PromptFormatOptions prompt_format_options(const ArTrackConfig& ar) {
  PromptFormatOptions o;
  o.chat_template = ar.data.chat_template;
  o.system_prompt = ar.data.system_prompt;
  o.template_kwargs = ar.data.chat_template_kwargs;
  if (ar.tokenizer.kind == TokenizerKind::kHf) o.tokenizer_path = ar.tokenizer.path;
  o.model_eos_ids = ar.model.eos_token_ids;
  o.model_vocab = ar.model.vocab_size;
  return o;
}

HfDirCompanions hf_dir_companions(const ArTrackConfig& ar, const PromptFormat& format,
                                  const models::Tokenizer& tokenizer, const ModelDir* source) {
  HfDirCompanions c;
  c.source = source;
  if (ar.tokenizer.kind == TokenizerKind::kHf) c.tokenizer_path = ar.tokenizer.path;
  if (format.template_from_file()) c.chat_template = format.template_source();
  c.stop_ids = format.stop_ids();
  c.bos_id = ar.model.bos_token_id ? ar.model.bos_token_id : tokenizer.bos_id();
  return c;
}

namespace {

void require(bool ok, const std::string& path, const std::string& message) {
  if (!ok) throw UserError(path + ": " + message);
}

// --- llama: a Llama / Qwen2 decoder (models/llama), tensor and context parallel ---

void validate_llama(const Config&) {}  // its rules are the generic ones of validate()

BuiltTextPolicy build_llama(const Config& c, const parallel::ParallelContext& ctx, torch::Device device,
                            torch::Dtype dtype) {
  const ArModelConfig& m = c.tracks.ar.model;
  models::LlamaForCausalLM model{nullptr};
  if (m.hf_dir) {
    model = models::load_llama(*m.hf_dir, ctx, dtype);
  } else {
    model = models::LlamaForCausalLM(llama_config(m), ctx, static_cast<uint64_t>(c.run.seed));
    model->to(dtype);
  }
  model->set_execution(c.train.attention == AttentionImpl::kFused          ? models::AttentionKernel::kFused
                       : c.train.attention == AttentionImpl::kMaterialised ? models::AttentionKernel::kMaterialised
                                                                           : models::AttentionKernel::kAuto,
                       c.train.recompute == Recompute::kLayers);
  model->to(device);
  if (!c.tracks.ar.lora.enabled()) return {std::make_unique<LlamaPolicy>(model), models::UnifiedModel{nullptr}};
  const models::LoraSpec spec = lora_spec(c.tracks.ar.lora);
  // Adapters draw from their own stream (not the weights' init), so with or without hf_dir they are the same.
  models::attach_lora(*model, spec, static_cast<uint64_t>(c.run.seed) + kLoraSeedOffset);
  nlohmann::json info{{"base_model_name_or_path", m.hf_dir ? nlohmann::json(*m.hf_dir) : nlohmann::json(nullptr)}};
  return {std::make_unique<LlamaPolicy>(model, models::LogProbOptions{}, spec, info), models::UnifiedModel{nullptr}};
}

BuiltTextPolicy load_llama(const std::string& dir, torch::Dtype dtype) {
  return {std::make_unique<LlamaPolicy>(models::load_llama(dir, {}, dtype)), models::UnifiedModel{nullptr}};
}

// --- unified: the shared text + image transformer (models/unified), dp only ---

void validate_unified(const Config& c) {
  const ArModelConfig& m = c.tracks.ar.model;
  const std::string mp = "tracks.ar.model";
  const std::string why = " (arch unified: the shared text + image transformer of models/unified)";
  require(m.num_kv_heads == m.num_heads, mp + ".num_kv_heads",
          "must equal num_heads (" + std::to_string(m.num_heads) + "): its attention is multi-head" + why);
  require(!m.tie_embeddings, mp + ".tie_embeddings", "must be false: its LM head is untied" + why);
  require(!m.qkv_bias, mp + ".qkv_bias", "must be false: its projections have no biases" + why);
  require(!m.qk_norm, mp + ".qk_norm", "must be false: its attention has no q/k norms" + why);
  require(!m.sliding_window, mp + ".sliding_window", "must be null: its attention has no sliding window" + why);
  require(m.block == ArBlock::kLlama, mp + ".block", "must be llama: its layers are the shared transformer's" + why);
  require(!m.query_pre_attn_scalar, mp + ".query_pre_attn_scalar", "must be null" + why);
  require(!m.head_dim || *m.head_dim * m.num_heads == m.hidden_size, mp + ".head_dim",
          "must be null or hidden_size / num_heads" + why);
  require(m.rope_scaling.type == RopeType::kNone, mp + ".rope_scaling.type", "must be none" + why);
  require(c.parallel.tp == 1 && c.parallel.cp == 1, mp + ".arch",
          "unified runs with parallel.tp: 1 and parallel.cp: 1 (its layers have no tensor- or context-parallel "
          "form yet); scale it with dp");
  require(c.parallel.rollout_ranks == 0 && !c.train.overlap, mp + ".arch",
          "unified does not support parallel.rollout_ranks or train.overlap yet; set them to 0 / false");
  const ImageModelConfig& im = c.tracks.image.model;  // the unified model's image side, track or not
  require(im.image_size % im.patch_size == 0, "tracks.image.model.patch_size",
          std::to_string(im.patch_size) + " does not divide image_size " + std::to_string(im.image_size) +
              " (the image side of tracks.ar.model.arch unified)");
}

BuiltTextPolicy build_unified(const Config& c, const parallel::ParallelContext&, torch::Device device,
                              torch::Dtype dtype) {
  const ArModelConfig& m = c.tracks.ar.model;
  const models::UnifiedConfig want = unified_config(m, c.tracks.image.model);
  models::UnifiedModel model{nullptr};
  if (m.hf_dir) {
    model = models::load_unified(*m.hf_dir, dtype);
    const nlohmann::json got_j = models::to_json(model->config(), dtype), want_j = models::to_json(want, dtype);
    for (const auto& [key, value] : want_j.items())
      if (got_j.at(key) != value)
        throw UserError("tracks.ar.model.hf_dir: " + *m.hf_dir + " holds a unified model with " + key + " " +
                        got_j.at(key).dump() + ", the recipe (tracks.ar.model / tracks.image.model) says " +
                        value.dump() + "; make them agree");
  } else {
    model = models::UnifiedModel(want, static_cast<uint64_t>(c.run.seed));
    model->to(dtype);
  }
  model->to(device);
  if (!c.tracks.ar.lora.enabled()) return {std::make_unique<UnifiedTextPolicy>(model), model};
  // The same spec and seed stream as the llama's: all-linear names the same seven projections.
  const models::LoraSpec spec = lora_spec(c.tracks.ar.lora);
  models::attach_lora(*model, spec, static_cast<uint64_t>(c.run.seed) + kLoraSeedOffset);
  nlohmann::json info{{"base_model_name_or_path", m.hf_dir ? nlohmann::json(*m.hf_dir) : nlohmann::json(nullptr)}};
  return {std::make_unique<UnifiedTextPolicy>(model, spec, info), model};
}

BuiltTextPolicy load_unified(const std::string& dir, torch::Dtype dtype) {
  models::UnifiedModel model = models::load_unified(dir, dtype);
  return {std::make_unique<UnifiedTextPolicy>(model), model};
}

const TextPolicySpec kSpecs[] = {
    {ArArch::kLlama, validate_llama, build_llama, load_llama, nullptr},
    {ArArch::kUnified, validate_unified, build_unified, load_unified,
     "the AR policy is the unified text + image model (model_type tandem_unified), which has no Hugging Face "
     "equivalent; its ar_model/ (config.json + model.safetensors) is already the portable form, and `tandem "
     "generate --checkpoint` samples from it"},
};

}  // namespace

const TextPolicySpec& text_policy_spec(ArArch arch) {
  for (const TextPolicySpec& s : kSpecs)
    if (s.arch == arch) return s;
  throw std::logic_error(std::string("text_policy_spec: no entry for arch ") + to_string(arch));
}

namespace {
// validate() runs each arch's rules through config/name_tables.h.
const ArModelRuleRegistrar kArchRules([](const Config& c) { text_policy_spec(c.tracks.ar.model.arch).validate(c); });
}  // namespace

}  // namespace tandem
