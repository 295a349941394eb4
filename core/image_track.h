// The image track: FlowGRPO on a class-conditional DiT. prepare() samples SDE trajectories with
// per-transition log-probs, scores the final images, computes group advantages (clamped to
// adv_clip_max), picks each sample's trained timesteps, exchanges and schedules samples with the
// track's own micro geometry, and recomputes old log-probs over exactly those micros.
#pragma once

#include <memory>

#include "core/config.h"
#include "core/exchange.h"
#include "core/loss.h"
#include "core/rewards/image_reward_fn.h"
#include "core/rewards/reward_fn.h"
#include "core/track.h"
#include "models/dit/dit.h"

namespace tandem {

class ImageTrack final : public Track {
 public:
  ImageTrack(const Config& config, const TrainerComms& comms, torch::Device device, torch::Dtype dtype);
  ~ImageTrack() override;
  std::string name() const override { return "image"; }
  std::vector<torch::Tensor> parameters() override { return model_->parameters(); }

  void prepare(int64_t step, MetricMap& metrics) override;
  void accumulate(int64_t mini, double weight, MetricMap& metrics) override;
  void finish(MetricMap& metrics) override;

  void save(const std::string& dir) override;
  void load(const std::string& dir) override;
  nlohmann::json state() const override { return nlohmann::json::object(); }
  void restore(const nlohmann::json&) override {}

  // Loads tracks.image.pretrain.path when it holds weights, else runs the pretraining steps
  // (fresh starts only) and saves them there. Collective over the dp group.
  void pretrain_or_load(bool fresh_start);
  // Rank-local: an ODE-sampled grid (two rows per class) written as a PNG.
  void write_sample_grid(const std::string& path);

  models::Dit& model() { return model_; }

 private:
  std::vector<double> score(const torch::Tensor& images, const std::vector<int64_t>& labels,
                            const std::vector<int64_t>& ids);
  std::vector<const ImageSample*> micro_samples(const MicroBatch& micro) const;
  // One trained transition (slot k) of a micro's samples under `model`.
  struct Transition {
    torch::Tensor log_prob;  // (B)
    torch::Tensor mean;      // (B, C, H, W)
    torch::Tensor std_dev;   // (B) std_dev_t
  };
  Transition transition(models::DitImpl& model, const std::vector<const ImageSample*>& samples, size_t k) const;

  Config config_;
  TrainerComms comms_;
  torch::Device device_;
  torch::Dtype dtype_;
  models::Dit model_{nullptr};
  models::Dit reference_{nullptr};  // frozen copy for the KL on transition means (kl.coef > 0)
  std::unique_ptr<rewards::ImageRewardFn> reward_;
  std::unique_ptr<rewards::RewardFn> command_reward_;  // reward.kind: command (PNG files)
  MicroGeometry geometry_;
  int64_t train_timesteps_ = 1;
  int64_t dp_rank_ = 0, dp_size_ = 1;

  RolloutDirectory directory_;
  Schedule schedule_;
  std::vector<ImageSample> mine_;
  std::vector<std::vector<torch::Tensor>> old_logp_;               // [mini][micro] (B, T)
  std::vector<std::vector<std::vector<torch::Tensor>>> ref_mean_;  // [mini][micro][k] (B, C, H, W)
  double loss_sum_ = 0, kl_sum_ = 0, first_ratio_dev_ = 0, ratio_dev_ = 0;
  PolicyStats stats_;
};

}  // namespace tandem
