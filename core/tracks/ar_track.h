// The AR track: GRPO on a text policy (a Llama / Qwen2 LM, or the text side of the unified text +
// image model). prepare() runs prompts -> sampler -> rewards ->
// group advantages -> sample exchange + schedule -> old / reference log-probs over exactly the
// schedule's micros; accumulate() trains one mini-batch of them.
#pragma once

#include <memory>
#include <optional>

#include "core/batch/exchange.h"
#include "core/config/config.h"
#include "core/config/model_dir.h"
#include "core/eval/ar_eval.h"
#include "core/grpo/policy_update.h"
#include "core/policies/prompt_format.h"
#include "core/policies/text_policy.h"
#include "core/rewards/reward_fn.h"
#include "core/tasks/prompt_source.h"
#include "core/tracks/track.h"
#include "models/tokenizers/tokenizer.h"
#include "models/unified/model.h"

namespace tandem {

struct EpisodeSetup;  // episode_setup.h

class ArTrack final : public Track {
 public:
  // rollout_only: a rollout rank's copy (parallel.rollout_ranks): no reference model; its dp is
  // the group of rollout ranks, which shard each step's prompts among themselves.
  ArTrack(const Config& config, const TrainerComms& comms, torch::Device device, torch::Dtype dtype,
          bool rollout_only = false);
  ~ArTrack() override;
  std::string name() const override { return "ar"; }
  std::vector<torch::Tensor> parameters() override { return policy_->parameters(); }
  std::vector<bool> tp_sharded() override { return policy_->tp_sharded(policy_->parameters()); }
  double weight() const override { return config_.tracks.ar.weight; }

  void prepare(int64_t step, MetricMap& metrics) override;
  void accumulate(int64_t mini, double weight, MetricMap& metrics) override;
  void finish(MetricMap& metrics) override;

  void save(const std::string& dir) override;
  void load(const std::string& dir) override;
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;

  // Supervised warm-start on reference answers (tracks.ar.warmstart); returns the final loss.
  // Gradients are summed over comms.grad; its own optimizer; logged, not in metrics.jsonl.
  double warmstart() override;
  int64_t warmstart_steps() const override { return config_.tracks.ar.warmstart.steps; }
  int warmstart_stop_signal() const override { return warmstart_stop_signal_; }
  // Step `step` of it (steps run in order from 0; the optimizer lives from step 0 to the last).
  double warmstart_step(int64_t step) override;
  // Copies the policy into the KL reference (kl.coef > 0): the policy RL starts from, after any
  // pretraining or warm-start. Saved in checkpoints (ar_reference/) so a resume keeps it.
  void refresh_reference() override;

  // The unified text + image model when tracks.ar.model.arch is unified (the image track draws
  // with it under tracks.image.model.arch shared), else empty.
  models::UnifiedModel unified_model() const { return unified_; }
  const models::Tokenizer& tokenizer() const { return *tokenizer_; }
  const PromptFormat& prompt_format() const { return *format_; }

  // This rank's share (over comms.dp) of `step`'s prompts: sampled and scored, no advantages.
  std::vector<ArSample> rollout(int64_t step, MetricMap& metrics);
  // Disaggregated rollout (comms.bridge set), train side: the start step, data cursor and weights
  // to the rollout ranks once, then the newest weights as `version` (rollout_bridge.h says when).
  MetricMap evaluate(const std::string& run_dir, int64_t completed) override;
  std::vector<nlohmann::json> sample_records(int64_t groups) const override;
  void publish_start(int64_t start_step) override;
  void publish_weights(int64_t version) override;
  double publish_seconds() const { return publish_s_; }  // this step's weight transfers
  // What the rollout ranks receive once, at the start, besides parameters(): a LoRA policy's base
  // when no file holds it (a random init, warm-started); else nothing.
  std::vector<torch::Tensor> start_only_parameters();
  // The version stamped on samples this rank generates (rollout ranks set it on each receipt).
  void set_policy_version(int64_t version) { policy_version_ = version; }

 private:
  struct Chunk;  // one mini-batch's groups under train.overlap (ar_overlap.cpp)
  std::vector<ArSample> generate_groups(int64_t step, const std::vector<tasks::ShardPrompt>& shard, MetricMap& metrics);
  std::vector<ArSample> receive_rollout(int64_t step, MetricMap& metrics);
  models::SamplingParams sampling_params() const;
  // Multi-turn episodes (tracks.ar.env, ar_episodes.cpp): the environment and the conversation
  // format, then one step's episodes as samples (model tokens trained, the rest masked).
  void setup_env();
  // The warm-start's demonstrations of this rank for a step (tracks.ar.warmstart.demos).
  std::vector<ArSample> demonstration_shard(int64_t step);
  std::vector<ArSample> generate_episodes(int64_t step, const std::vector<tasks::ShardPrompt>& shard,
                                          MetricMap& metrics);
  void rollout_stats(const std::vector<ArSample>& local, MetricMap& metrics);
  void set_advantages(std::vector<ArSample>& local) const;
  ScheduleOptions schedule_options() const;
  void schedule_metrics(const ScheduleOptions& options, MetricMap& metrics) const;
  // train.overlap: generates mini-batch by mini-batch while a second thread runs each finished
  // mini-batch's old / reference log-probs; leaves directory_, schedule_, mine_, old_logp_ and
  // ref_logp_ exactly as the plain path would. Returns every local sample (for the metrics).
  std::vector<ArSample> prepare_overlapped(int64_t step, MetricMap& metrics);
  std::vector<ArSample> replay(int64_t step);
  int64_t policy_vocab_size() const;
  bool share_in_training() const;  // tracks.ar.share_prompt where it applies
  void keep_shown(const std::vector<ArSample>& local);
  int64_t ar_prompts_per_step() const;
  void dump(int64_t step, const std::vector<ArSample>& samples) const;
  std::vector<const ArSample*> micro_samples(const MicroBatch& micro) const;
  // No-grad per-token log-probs of every micro of this rank in `schedule` under `policy`, (N)
  // each; adds the entropy sum and its token count to `entropy` when given. No collectives.
  std::vector<std::vector<torch::Tensor>> forward_micros(PolicyModel& policy, const Schedule& schedule,
                                                         const RolloutDirectory& directory,
                                                         const std::vector<ArSample>& mine, double* entropy);
  void reduce_entropy(const double entropy[2], MetricMap& metrics) const;

  Config config_;
  TrainerComms comms_;
  torch::Device device_;
  torch::Dtype dtype_;
  std::unique_ptr<models::Tokenizer> tokenizer_;
  std::unique_ptr<PromptFormat> format_;
  std::unique_ptr<ArEvaluator> evaluator_;  // the recipe's eval section, when on
  std::vector<ArSample> shown_;             // the last step's first groups on this rank, for sample_records
  std::optional<ModelDir> source_;          // tracks.ar.model.hf_dir (a Llama / Qwen2), for complete checkpoints
  nlohmann::json base_identity_;            // LoRA: the frozen base (hf_dir and its weights' hash, or ar_base/)
  std::unique_ptr<TextPolicy> policy_;
  std::unique_ptr<TextPolicy> reference_;  // frozen copy for the KL term (kl.coef > 0)
  models::UnifiedModel unified_{nullptr};  // policy_'s model when it is the unified one
  std::unique_ptr<tasks::PromptSource> prompts_;
  std::unique_ptr<rewards::RewardFn> reward_;
  std::unique_ptr<EpisodeSetup> episodes_;  // tracks.ar.env, when on
  UpdateOptions update_;
  MicroGeometry geometry_;

  // The step in flight.
  RolloutDirectory directory_;
  Schedule schedule_;
  std::vector<ArSample> mine_;                                   // samples scheduled to this rank, by id
  std::vector<std::vector<torch::Tensor>> old_logp_, ref_logp_;  // [mini][micro] (N)
  MicroOutcome outcome_;
  int64_t dp_rank_ = 0, dp_size_ = 1;
  int64_t policy_version_ = 0, start_step_ = 0;
  int64_t step_ = 0;  // the step in flight
  double publish_s_ = 0;
  std::unique_ptr<tasks::PromptSource> warm_source_;  // the warm-start in progress
  std::vector<nlohmann::ordered_json> warm_demos_;    // with env: its demonstrations
  std::vector<int64_t> warm_order_;                   // their order in epoch warm_order_epoch_
  int64_t warm_order_epoch_ = -1;
  int warmstart_stop_signal_ = 0;  // the stop signal that ended warmstart() early
  std::unique_ptr<torch::optim::AdamW> warm_opt_;
};

}  // namespace tandem
