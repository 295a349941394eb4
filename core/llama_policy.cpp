// The adapter only renames fields; the model does the work.
#include "core/llama_policy.h"

namespace tandem {

LlamaPolicy::LlamaPolicy(models::LlamaForCausalLM model, models::LogProbOptions options)
    : model_(std::move(model)), options_(options) {}

models::PackedInput to_model_input(const PackedBatch& b) {
  return {b.input_ids, b.position_ids, b.cu_seqlens, b.max_seqlen};
}

models::PaddedInput to_model_input(const PaddedBatch& b) { return {b.input_ids, b.position_ids, b.attention_mask}; }

PolicyModel::Output LlamaPolicy::forward_packed(const PackedBatch& batch, bool with_entropy) {
  models::LogProbOptions o = options_;
  o.with_entropy = with_entropy;
  const models::TokenLogProbs r = model_->log_probs(to_model_input(batch), batch.targets, o);
  return {r.logp, r.entropy};
}

PolicyModel::Output LlamaPolicy::forward_padded(const PaddedBatch& batch, bool with_entropy) {
  models::LogProbOptions o = options_;
  o.with_entropy = with_entropy;
  const models::TokenLogProbs r = model_->log_probs(to_model_input(batch), batch.targets, o);
  return {r.logp, r.entropy};
}

std::vector<torch::Tensor> LlamaPolicy::parameters() { return model_->parameters(); }

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
  return c;
}

}  // namespace tandem
