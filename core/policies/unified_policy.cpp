// The unified model's text side behind the AR track's TextPolicy interface.
#include "core/policies/unified_policy.h"

#include <filesystem>
#include <optional>

#include "common/error.h"
#include "core/batch/collate.h"
#include "core/tasks/shapes.h"
#include "models/safetensors.h"
#include "models/unified/generate.h"
#include "models/unified/weights.h"
#include "parallel/tp_layers.h"

namespace tandem {

models::UnifiedConfig unified_config(const ArModelConfig& ar, const ImageModelConfig& image) {
  models::UnifiedConfig c;
  c.vocab_size = ar.vocab_size;
  c.hidden_size = ar.hidden_size;
  c.num_layers = ar.num_layers;
  c.num_heads = ar.num_heads;
  c.intermediate_size = ar.intermediate_size;
  c.max_text_len = ar.max_seq_len;
  c.rope_theta = ar.rope_theta;
  c.rms_eps = ar.rms_eps;
  c.image_size = image.image_size;
  c.channels = image.channels;
  c.patch_size = image.patch_size;
  return c;
}

std::string class_prompt_text(int64_t label) { return "draw " + tasks::shape_name(label); }

std::vector<std::vector<int64_t>> class_prompts(const models::Tokenizer& tokenizer, int64_t num_classes) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t k = 0; k < num_classes; ++k) {
    const std::string text = class_prompt_text(k);
    std::vector<int64_t> ids;
    if (auto bos = tokenizer.bos_id()) ids.push_back(*bos);
    std::vector<int64_t> body;
    try {
      body = tokenizer.encode(text);
    } catch (const std::exception&) {
      body.clear();
    }
    if (body.empty() || tokenizer.decode(body, true) != text)
      throw UserError("tracks.ar.tokenizer: cannot write the image prompt '" + text +
                      "' (a shared model reads its image prompts as text; the char alphabet needs a-z and space)");
    ids.insert(ids.end(), body.begin(), body.end());
    out.push_back(ids);
  }
  return out;
}

UnifiedTextPolicy::UnifiedTextPolicy(models::UnifiedModel model) : model_(std::move(model)) {}

UnifiedTextPolicy::UnifiedTextPolicy(models::UnifiedModel model, models::LoraSpec lora, nlohmann::json adapter_info)
    : model_(std::move(model)), lora_(std::move(lora)), adapter_info_(std::move(adapter_info)) {
  TORCH_CHECK(models::has_lora(*model_), "UnifiedTextPolicy: the model has no adapters attached");
}

std::vector<torch::Tensor> UnifiedTextPolicy::parameters() {
  if (lora_) return models::lora_parameters(*model_);
  if (adapters_off_) return models::base_parameters(*model_);
  return model_->parameters();
}

PolicyModel::Output UnifiedTextPolicy::rows(const torch::Tensor& ids, const torch::Tensor& lengths,
                                            const torch::Tensor& targets, bool with_entropy) {
  const torch::Device d = model_->device();
  std::optional<parallel::LoraOffGuard> off;
  if (adapters_off_) off.emplace();
  const torch::Tensor logits = model_->text_logits(ids.to(d), lengths.to(d));  // (B, T, V), float32 / float64
  const torch::Tensor logp_all = torch::log_softmax(logits, -1);               // (B, T, V)
  Output out;
  out.logp = logp_all.gather(-1, targets.to(d).unsqueeze(-1)).squeeze(-1);  // (B, T)
  if (with_entropy) out.entropy = -(logp_all.exp() * logp_all).sum(-1);     // (B, T)
  return out;
}

PolicyModel::Output UnifiedTextPolicy::forward_padded(const PaddedBatch& b, bool with_entropy) {
  return rows(b.input_ids, b.lengths, b.targets, with_entropy);
}

PolicyModel::Output UnifiedTextPolicy::forward_packed(const PackedBatch& b, bool with_entropy) {
  if (b.prefix_of.defined())
    throw std::logic_error("the unified model runs packed micros as padded rows: it takes no shared prompts");
  const torch::Tensor cu = b.cu_seqlens.to(torch::kInt64);            // (B+1)
  const torch::Tensor lengths = cu.slice(0, 1) - cu.slice(0, 0, -1);  // (B)
  const int64_t t = b.max_seqlen;
  const torch::Tensor ids = unpack_to_padded(b.input_ids.view({-1}), b.cu_seqlens, t);  // (B, T)
  const torch::Tensor targets = unpack_to_padded(b.targets, b.cu_seqlens, t);           // (B, T)
  const Output padded = rows(ids, lengths, targets, with_entropy);
  // Row-major order of the valid slots is the packed order.
  const torch::Tensor valid =
      (torch::arange(t, torch::kInt64).unsqueeze(0) < lengths.unsqueeze(1)).to(padded.logp.device());  // (B, T)
  Output out;
  out.logp = padded.logp.masked_select(valid);  // (N)
  if (with_entropy) out.entropy = padded.entropy.masked_select(valid);
  return out;
}

std::vector<models::Generation> UnifiedTextPolicy::generate(const std::vector<models::GenerationRequest>& requests,
                                                            const models::SamplingParams& params) {
  if (adapters_off_) throw std::logic_error("the KL reference does not generate");
  return models::generate_unified(*model_, requests, params);
}

void UnifiedTextPolicy::save(const std::string& dir, bool write) {
  if (!write) return;
  if (!lora_) return save_base(dir, write);
  models::write_peft_adapter(dir, *lora_, models::lora_state(*model_), models::causal_lm_adapter_info(adapter_info_));
}

void UnifiedTextPolicy::load(const std::string& dir) {
  if (lora_)
    models::load_lora_state(*model_, models::read_peft_weights(dir), dir);
  else
    load_base(dir);
}

void UnifiedTextPolicy::save_base(const std::string& dir, bool write) {
  if (write) models::save_unified(*model_, dir);
}

void UnifiedTextPolicy::load_base(const std::string& dir) {
  const std::string path = dir + "/model.safetensors";
  if (!std::filesystem::exists(path)) throw UserError(path + ": no such file (not a unified model directory)");
  models::load_unified_state(*model_, models::load_safetensors(path), path);
}

models::UnifiedModel frozen_copy(models::UnifiedModelImpl& model) {
  TORCH_CHECK(!models::has_lora(model), "frozen_copy: a model with adapters is referenced with them off");
  models::UnifiedModel ref(model.config(), std::nullopt);
  ref->to(model.device(), model.dtype());
  torch::NoGradGuard no_grad;
  const auto src = model.named_parameters();
  for (auto& p : ref->named_parameters()) p.value().copy_(src[p.key()]), p.value().set_requires_grad(false);
  return ref;
}

std::unique_ptr<TextPolicy> UnifiedTextPolicy::frozen_copy() {
  if (lora_ || adapters_off_) {  // the base: the same tensors, read with the adapters off
    auto ref = std::make_unique<UnifiedTextPolicy>(model_);
    ref->adapters_off_ = true;
    return ref;
  }
  return std::make_unique<UnifiedTextPolicy>(tandem::frozen_copy(*model_));
}

}  // namespace tandem
