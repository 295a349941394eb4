// Built-in image rewards: JPEG (in)compressibility as in DDPO (Black et al. 2023), brightness and
// a colour target, plus the name -> implementation table for tracks.image.reward.kind.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/rewards/image_reward_fn.h"

namespace tandem::rewards {

inline constexpr int kDefaultJpegQuality = 95;  // DDPO's setting

// size_kb = bytes of the image as a quality-95 JPEG / 1000 (DDPO's unit).
// jpeg_compressibility = -size_kb (favours flat images), jpeg_incompressibility = +size_kb.
class JpegSizeReward : public ImageRewardFn {
 public:
  JpegSizeReward(bool compressible, int quality = kDefaultJpegQuality);
  std::vector<double> score(const torch::Tensor& images, const std::vector<int64_t>& class_labels) override;
  std::string name() const override;

 private:
  bool compressible_;
  int quality_;
};

// brightness = mean over pixels of the luma 0.299 R + 0.587 G + 0.114 B of the image mapped to
// [0, 1] (a single channel is its own luma); in [0, 1].
class BrightnessReward : public ImageRewardFn {
 public:
  std::vector<double> score(const torch::Tensor& images, const std::vector<int64_t>& class_labels) override;
  std::string name() const override { return "brightness"; }
};

// color_target = -|| m - target ||_2, m the image's mean colour in [0, 1] RGB; in [-sqrt(3), 0].
// A single-channel image compares its mean with the target's luma.
class ColorTargetReward : public ImageRewardFn {
 public:
  explicit ColorTargetReward(const std::array<double, 3>& target);
  std::vector<double> score(const torch::Tensor& images, const std::vector<int64_t>& class_labels) override;
  std::string name() const override { return "color_target"; }

 private:
  std::array<double, 3> target_;
};

struct ImageRewardOptions {
  int64_t image_size = 16;  // the model's geometry: shape_class builds its templates for it
  int64_t channels = 3;
  int64_t num_classes = 4;
  int jpeg_quality = kDefaultJpegQuality;
  std::array<double, 3> color_target{0.9, 0.1, 0.1};  // a strong red
};

// The image reward names: the recipe schema offers exactly these ("command" is served by the
// image track with reward_process.h, the others by make_image_reward()).
const std::vector<std::string>& image_reward_names();

// `kind` is one of image_reward_names() but "command". Throws UserError for an unknown kind (with
// the nearest name) and for "command", which the image track does not run yet.
std::unique_ptr<ImageRewardFn> make_image_reward(const std::string& kind, const ImageRewardOptions& options);

}  // namespace tandem::rewards
