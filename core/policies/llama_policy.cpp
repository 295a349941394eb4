// The adapter only renames fields; the model does the work.
#include "core/policies/llama_policy.h"

#include <type_traits>

#include "models/llama/turn_sampler.h"
#include "models/llama/weights.h"

namespace tandem {

LlamaPolicy::LlamaPolicy(models::LlamaForCausalLM model, models::LogProbOptions options)
    : model_(std::move(model)), options_(options) {}

LlamaPolicy::LlamaPolicy(models::LlamaForCausalLM model, models::LogProbOptions options, models::LoraSpec lora,
                         nlohmann::json adapter_info)
    : model_(std::move(model)), options_(options), lora_(std::move(lora)), adapter_info_(std::move(adapter_info)) {
  TORCH_CHECK(models::has_lora(*model_), "LlamaPolicy: the model has no adapters attached");
}

models::PackedInput to_model_input(const PackedBatch& b) {
  return {b.input_ids, b.position_ids, b.cu_seqlens, b.max_seqlen, b.prefix_of};
}

models::PaddedInput to_model_input(const PaddedBatch& b) { return {b.input_ids, b.position_ids, b.attention_mask}; }

namespace {
// Batches are collated on the host; a CUDA model gets its inputs moved once here. The packing
// metadata (cu_seqlens, prefix_of) stays on the host, where the model plans its attention.
template <class Input>
Input on_device(Input in, const torch::Device& d) {
  if (d.is_cpu()) return in;
  in.input_ids = in.input_ids.to(d);
  in.position_ids = in.position_ids.to(d);
  if constexpr (!std::is_same_v<Input, models::PackedInput>) {
    in.attention_mask = in.attention_mask.to(d);
  }
  return in;
}
}  // namespace

template <class Batch>
PolicyModel::Output LlamaPolicy::run(const Batch& batch, bool with_entropy, const parallel::TokenLossFn* loss) {
  models::LogProbOptions o = options_;
  o.with_entropy = with_entropy;
  if (loss != nullptr) o.token_loss = *loss;
  if (head_on_trained_rows_) o.wanted = batch.loss_mask;  // every consumer of the log-probs masks them with it
  const torch::Device d = model_->parameters().front().device();
  std::optional<parallel::LoraOffGuard> off;
  if (adapters_off_) off.emplace();
  const models::TokenLogProbs r = model_->log_probs(on_device(to_model_input(batch), d), batch.targets.to(d), o);
  return {r.logp, r.entropy, r.loss};
}

PolicyModel::Output LlamaPolicy::forward_packed(const PackedBatch& batch, bool with_entropy) {
  return run(batch, with_entropy, nullptr);
}

PolicyModel::Output LlamaPolicy::forward_padded(const PaddedBatch& batch, bool with_entropy) {
  return run(batch, with_entropy, nullptr);
}

PolicyModel::Output LlamaPolicy::forward_packed_fused(const PackedBatch& batch, bool with_entropy,
                                                      const parallel::TokenLossFn& loss) {
  return run(batch, with_entropy, &loss);
}

PolicyModel::Output LlamaPolicy::forward_padded_fused(const PaddedBatch& batch, bool with_entropy,
                                                      const parallel::TokenLossFn& loss) {
  return run(batch, with_entropy, &loss);
}

std::vector<torch::Tensor> LlamaPolicy::parameters() {
  if (lora_) return models::lora_parameters(*model_);
  if (adapters_off_) return models::base_parameters(*model_);
  return model_->parameters();
}

std::vector<torch::Tensor> LlamaPolicy::base_parameters() { return models::base_parameters(*model_); }

std::vector<models::Generation> LlamaPolicy::generate(const std::vector<models::GenerationRequest>& requests,
                                                      const models::SamplingParams& params) {
  std::optional<parallel::LoraOffGuard> off;
  if (adapters_off_) off.emplace();
  return models::generate(*model_, requests, params);
}

namespace {

// models::TurnSampler behind the runner's interface.
class LlamaTurns : public env::TurnGenerator {
 public:
  LlamaTurns(models::LlamaForCausalLMImpl& model, const models::SamplingParams& params, int64_t slots, int64_t capacity)
      : sampler_(model, params, slots, capacity) {}
  void start(int64_t id, const std::vector<int64_t>& prompt, uint64_t seed, int64_t max_new) override {
    sampler_.start(id, prompt, seed, max_new);
  }
  void resume(int64_t id, const std::vector<int64_t>& forced, int64_t max_new) override {
    sampler_.resume(id, forced, max_new);
  }
  void finish(int64_t id) override { sampler_.finish(id); }
  std::vector<env::GeneratedTurn> step() override {
    std::vector<env::GeneratedTurn> out;
    for (auto& r : sampler_.step())
      out.push_back({r.id, std::move(r.turn.tokens), std::move(r.turn.logp), r.turn.stopped});
    return out;
  }
  bool busy() const override { return sampler_.can_advance(); }

 private:
  models::TurnSampler sampler_;
};

}  // namespace

std::unique_ptr<env::TurnGenerator> LlamaPolicy::turn_generator(const models::SamplingParams& params, int64_t slots,
                                                                int64_t capacity) {
  if (adapters_off_) throw std::logic_error("the KL reference does not generate");
  return std::make_unique<LlamaTurns>(*model_, params, slots, capacity);
}

void LlamaPolicy::save(const std::string& dir, bool write) {
  if (lora_)
    models::save_peft_adapter(*model_, *lora_, dir, write, adapter_info_);
  else
    models::save_llama(*model_, dir, write);
}

void LlamaPolicy::load(const std::string& dir) {
  if (lora_)
    models::load_lora_state(*model_, models::read_peft_weights(dir), dir);
  else
    load_base(dir);
}

void LlamaPolicy::save_base(const std::string& dir, bool write) { models::save_llama(*model_, dir, write); }

void LlamaPolicy::load_base(const std::string& dir) {
  models::load_hf_state(*model_, models::load_hf_weights(dir), dir);
}

std::unique_ptr<TextPolicy> LlamaPolicy::frozen_copy() {
  if (lora_ || adapters_off_) {  // the base: the same tensors, read with the adapters off
    auto ref = std::make_unique<LlamaPolicy>(model_, options_);
    ref->adapters_off_ = true;
    ref->head_on_trained_rows_ = head_on_trained_rows_;
    return ref;
  }
  models::LlamaForCausalLM ref(model_->config(), model_->parallel_context(), std::nullopt);
  const torch::Tensor any = model_->parameters().front();
  ref->to(any.scalar_type());
  ref->to(any.device());
  torch::NoGradGuard no_grad;
  const auto src = model_->named_parameters();
  for (auto& p : ref->named_parameters()) p.value().copy_(src[p.key()]), p.value().set_requires_grad(false);
  auto copy = std::make_unique<LlamaPolicy>(ref, options_);
  copy->head_on_trained_rows_ = head_on_trained_rows_;
  return copy;
}

models::LlamaConfig llama_config(const ArModelConfig& m) {
  models::LlamaConfig c;
  c.vocab_size = m.vocab_size;
  c.hidden_size = m.hidden_size;
  c.num_layers = m.num_layers;
  c.num_heads = m.num_heads;
  c.num_kv_heads = m.num_kv_heads;
  c.intermediate_size = m.intermediate_size;
  c.max_seq_len = m.max_seq_len;
  c.rope_theta = m.rope_theta;
  c.rms_eps = m.rms_eps;
  c.tie_embeddings = m.tie_embeddings;
  c.qkv_bias = m.qkv_bias;
  c.qk_norm = m.qk_norm;
  c.sliding_window = m.sliding_window.value_or(0);
  c.full_attention_layers = m.full_attention_layers;
  c.rope_local_theta = m.rope_local_theta.value_or(0);
  c.block = m.block == ArBlock::kGemma3 ? models::DecoderBlock::kGemma3 : models::DecoderBlock::kLlama;
  c.query_pre_attn_scalar = m.query_pre_attn_scalar.value_or(0);
  if (m.head_dim && (m.num_heads <= 0 || *m.head_dim * m.num_heads != m.hidden_size)) c.explicit_head_dim = *m.head_dim;
  const RopeScalingConfig& r = m.rope_scaling;
  c.rope_scaling.kind = r.type == RopeType::kLinear   ? models::RopeScalingKind::kLinear
                        : r.type == RopeType::kLlama3 ? models::RopeScalingKind::kLlama3
                                                      : models::RopeScalingKind::kNone;
  c.rope_scaling.factor = r.factor;
  c.rope_scaling.low_freq_factor = r.low_freq_factor;
  c.rope_scaling.high_freq_factor = r.high_freq_factor;
  c.rope_scaling.original_max_seq_len = r.original_max_seq_len;
  return c;
}

models::LoraSpec lora_spec(const LoraConfig& l) {
  models::LoraSpec spec;
  spec.rank = l.rank;
  spec.alpha = l.alpha;
  if (l.targets.size() == 1 && l.targets[0] == "all-linear")
    spec.targets = models::lora_linear_names();
  else
    spec.targets = l.targets;
  return spec;
}

}  // namespace tandem
