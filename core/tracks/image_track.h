// The image track: FlowGRPO on a label-conditional flow model. prepare() samples SDE trajectories with
// per-transition log-probs, scores the final images, computes group advantages (clamped to
// adv_clip_max), picks each sample's trained timesteps, exchanges and schedules samples with the
// track's own micro geometry, and recomputes old log-probs over exactly those micros. The policy
// is a FlowModel: its own DiT (labels are classes), or with tracks.image.model.arch shared the AR
// track's unified model, which reads each label as the text prompt "draw <class>".
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "core/batch/exchange.h"
#include "core/config/config.h"
#include "core/grpo/loss.h"
#include "core/rewards/image_reward_fn.h"
#include "core/rewards/reward_fn.h"
#include "core/tracks/track.h"
#include "models/dit/dit.h"
#include "models/layers/flow_model.h"
#include "models/layers/lora_linear.h"
#include "models/tokenizers/tokenizer.h"
#include "models/unified/model.h"

namespace tandem {

// Tests only: recompute old log-probs over micros of another size than training's (what a separate
// "log-prob micro size" would do). The slice guard in accumulate() refuses such old log-probs
// unless skip_slice_guard, which exists so a test can show what the guard prevents.
struct ImageTrackTestHooks {
  std::optional<int64_t> old_logp_micro_batch_size;
  bool skip_slice_guard = false;
};

class ImageTrack final : public Track {
 public:
  // shared / tokenizer: the AR track's unified model and tokenizer (arch shared), else empty.
  ImageTrack(const Config& config, const TrainerComms& comms, torch::Device device, torch::Dtype dtype,
             models::UnifiedModel shared_model = models::UnifiedModel{nullptr},
             const models::Tokenizer* tokenizer = nullptr);
  ~ImageTrack() override;
  std::string name() const override { return "image"; }
  // With tracks.image.lora the adapters only (the base is frozen).
  std::vector<torch::Tensor> parameters() override;
  double weight() const override { return config_.tracks.image.weight; }

  void prepare(int64_t step, MetricMap& metrics) override;
  void accumulate(int64_t mini, double weight, MetricMap& metrics) override;
  void finish(MetricMap& metrics) override;

  void save(const std::string& dir) override;
  void load(const std::string& dir) override;
  nlohmann::json state() const override { return nlohmann::json::object(); }
  void restore(const nlohmann::json&) override {}

  // Loads tracks.image.pretrain.path when it holds weights, else runs the pretraining steps
  // (fresh starts only) and saves them there with pretrain.json (its flow steps and the
  // `between_steps` text warm-start steps it includes); `between(i)` runs after pretraining step
  // i (the shared model's text warm-start interleaves there). Returns, when weights were loaded,
  // the text warm-start steps they include (0 without a pretrain.json). Collective over dp.
  // Takes the KL reference from the result.
  std::optional<int64_t> pretrain_or_load(bool fresh_start, const std::function<void(int64_t)>& between = {},
                                          int64_t between_steps = 0);
  // The start-up pretraining: pretrain_or_load, with `text`'s warm-start steps spread evenly over
  // the flow steps when the track draws with the AR track's model (neither skill trained away).
  bool pretrain(bool fresh, Track* text) override;
  // Copies the policy into the KL reference (after every change of the starting weights).
  void refresh_reference() override;
  // The grid below at run_dir/samples/step_NNNNNN.png.
  std::string write_samples(const std::string& run_dir, int64_t completed) override;
  // eval.image: samples_per_class images of every class from fixed noise (Euler ODE), their mean
  // reward, and their grid at run_dir/samples/eval_step_NNNNNN.png (rank 0).
  MetricMap evaluate(const std::string& run_dir, int64_t completed) override;
  // Rank-local: an ODE-sampled grid (four rows, a column per class) written as a PNG, with a JSON beside it
  // (same name, .json) holding each cell's prompt and the shape classifier's verdict. Returns the
  // share of cells whose shape the classifier reads as their prompt's class.
  double write_sample_grid(const std::string& path);

  void set_test_hooks(const ImageTrackTestHooks& hooks) { hooks_ = hooks; }
  bool shared() const { return config_.tracks.image.model.arch == ImageArch::kShared; }

 private:
  std::vector<double> score(const torch::Tensor& images, const std::vector<int64_t>& labels,
                            const std::vector<int64_t>& ids);
  std::vector<const ImageSample*> micro_samples(const MicroBatch& micro) const;
  // Throws std::logic_error unless micro `micro` of `mini` trains on exactly the samples, in the
  // order, its old log-probs were computed over. prepare() computes both from schedule_, so in a
  // run this is an invariant check; it fires when old log-probs come from other slices (the test
  // hook below is what makes that happen).
  void check_old_logp_slice(int64_t mini, size_t micro, const std::vector<const ImageSample*>& samples) const;
  void recompute_old_logp_for_test();
  // One trained transition (slot k) of a micro's samples under `model`.
  struct Transition {
    torch::Tensor log_prob;  // (B)
    torch::Tensor mean;      // (B, C, H, W)
    torch::Tensor std_dev;   // (B) std_dev_t
  };
  Transition transition(models::FlowModel& model, const std::vector<const ImageSample*>& samples, size_t k) const;
  // The KL reference's: the frozen copy's, or a LoRA policy's base (the same model, adapters off).
  Transition reference_transition(const std::vector<const ImageSample*>& samples, size_t k) const;
  bool kl_on() const { return config_.tracks.image.algo.kl.coef > 0; }
  // Loads a model.safetensors into `model`; UserError hints at a tracks.image.model mismatch.
  static void load_weights(models::FlowModel& model, const std::string& path);
  // Resume of a LoRA policy: the checkpoint's base must be the one this run loaded.
  void check_lora_base(const std::string& checkpoint_base);

  Config config_;
  TrainerComms comms_;
  torch::Device device_;
  torch::Dtype dtype_;
  std::unique_ptr<models::FlowModel> flow_;  // the policy
  // Frozen copy for the KL on transition means (kl.coef > 0); none with LoRA (the base is it).
  std::unique_ptr<models::FlowModel> reference_;
  models::DitImpl* lora_dit_ = nullptr;  // tracks.image.lora: the DiT carrying the adapters
  // The module whose adapters this track trains: lora_dit_, or the shared unified model when
  // tracks.ar.lora put adapters on it (saved by the AR track); null without LoRA.
  torch::nn::Module* lora_root_ = nullptr;
  models::LoraSpec lora_spec_;  // their spec, targets resolved (all-linear named)
  std::unique_ptr<rewards::ImageRewardFn> reward_;
  std::unique_ptr<rewards::RewardFn> command_reward_;  // reward.kind: command (PNG files)
  MicroGeometry geometry_;
  int64_t train_timesteps_ = 1;
  int64_t dp_rank_ = 0, dp_size_ = 1;

  RolloutDirectory directory_;
  Schedule schedule_;
  std::vector<ImageSample> mine_;
  std::vector<std::vector<torch::Tensor>> old_logp_;  // [mini][micro] (B, T)
  // [mini][micro] the sample ids each old log-prob row came from, in the micro it was computed in:
  // the guard checks they are exactly the training micro's.
  std::vector<std::vector<std::vector<int64_t>>> old_slices_;
  ImageTrackTestHooks hooks_;
  std::vector<std::vector<std::vector<torch::Tensor>>> ref_mean_;  // [mini][micro][k] (B, C, H, W)
  double loss_sum_ = 0, kl_sum_ = 0, first_ratio_dev_ = 0, ratio_dev_ = 0;
  PolicyStats stats_;
};

}  // namespace tandem
