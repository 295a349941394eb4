// The AR track: GRPO on a Llama / Qwen2 policy. prepare() runs prompts -> sampler -> rewards ->
// group advantages -> sample exchange + schedule -> old / reference log-probs over exactly the
// schedule's micros; accumulate() trains one mini-batch of them.
#pragma once

#include <memory>
#include <optional>

#include "core/config.h"
#include "core/exchange.h"
#include "core/llama_policy.h"
#include "core/policy_update.h"
#include "core/rewards/reward_fn.h"
#include "core/tasks/prompt_source.h"
#include "core/track.h"
#include "models/tokenizer.h"

namespace tandem {

// The task's prompt stream for `seed`, with the recipe's digit range for synthetic tasks.
std::unique_ptr<tasks::PromptSource> make_ar_prompts(const ArDataConfig& data, int64_t seed);

class ArTrack final : public Track {
 public:
  ArTrack(const Config& config, const TrainerComms& comms, torch::Device device, torch::Dtype dtype);
  std::string name() const override { return "ar"; }
  std::vector<torch::Tensor> parameters() override { return policy_->parameters(); }

  void prepare(int64_t step, MetricMap& metrics) override;
  void accumulate(int64_t mini, double weight, MetricMap& metrics) override;
  void finish(MetricMap& metrics) override;

  void save(const std::string& dir) override;
  void load(const std::string& dir) override;
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;

  // Supervised warm-start on reference answers (tracks.ar.warmstart); returns the final loss.
  // Gradients are summed over comms.grad; its own optimizer; logged, not in metrics.jsonl.
  double warmstart();

  models::LlamaForCausalLM& model() { return policy_->model(); }
  const models::Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  std::vector<ArSample> rollout(int64_t step, MetricMap& metrics);
  std::vector<ArSample> replay(int64_t step);
  void dump(int64_t step, const std::vector<ArSample>& samples) const;
  std::vector<const ArSample*> micro_samples(const MicroBatch& micro) const;
  // No-grad per-token log-probs of every micro of this rank under `policy`, (N) each.
  std::vector<std::vector<torch::Tensor>> forward_micros(LlamaPolicy& policy, MetricMap* entropy_metrics);

  Config config_;
  TrainerComms comms_;
  torch::Device device_;
  torch::Dtype dtype_;
  std::unique_ptr<models::Tokenizer> tokenizer_;
  std::unique_ptr<LlamaPolicy> policy_;
  std::unique_ptr<LlamaPolicy> reference_;  // frozen copy for the KL term (kl.coef > 0)
  std::unique_ptr<tasks::PromptSource> prompts_;
  std::unique_ptr<rewards::RewardFn> reward_;
  UpdateOptions update_;
  MicroGeometry geometry_;

  // The step in flight.
  RolloutDirectory directory_;
  Schedule schedule_;
  std::vector<ArSample> mine_;                      // samples scheduled to this rank, by id
  std::vector<std::vector<torch::Tensor>> old_logp_, ref_logp_;  // [mini][micro] (N)
  MicroOutcome outcome_;
  int64_t dp_rank_ = 0, dp_size_ = 1;
};

}  // namespace tandem
