// A fixed, training-free shape classifier built from the shapes generator (core/tasks/shapes.h),
// and the shape_class reward on top of it: does the image show the shape of its conditioning class?
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "core/rewards/image_reward_fn.h"

namespace tandem::rewards {

// Classification works at most at this resolution (larger images are area-averaged down): the
// template bank grows with the square of the size and 32 pixels already resolve every shape.
inline constexpr int64_t kShapeClassifierMaxSize = 32;
// Temperature of the soft reward over cosine similarities in [-1, 1]. On clean 16x16 shapes the
// right class leads the runner-up by 0.07-0.09 (median; circle / square / diamond are the close
// ones), which this turns into a reward of ~0.95.
inline constexpr double kShapeClassTemperature = 0.02;

// Template matching. An image's foreground map f is the per-pixel colour distance to its
// background, estimated as the per-channel median of the border pixels (the generator keeps shapes
// off the border), so the colours of shape and background do not matter. Each class has clean
// coverage templates rendered on a grid of the generator's centre offsets and radii (spacing
// <= 0.75 pixel). score_k = max over class k's templates t of cos(f - mean f, t - mean t).
class ShapeClassifier {
 public:
  ShapeClassifier(int64_t image_size, int64_t num_classes);

  // images (B, C, H, W) in [-1, 1], H = W = image_size -> (B, K) float64 class scores in [-1, 1].
  torch::Tensor class_scores(const torch::Tensor& images) const;
  std::vector<int64_t> classify(const torch::Tensor& images) const;  // argmax of class_scores

  int64_t num_classes() const { return num_classes_; }
  int64_t templates_per_class() const { return templates_.size(1); }

 private:
  int64_t image_size_, work_size_, num_classes_;
  torch::Tensor templates_;  // (K, T, P) zero-mean unit-norm, P = work_size^2
};

// shape_class = softmax_k(score_k / kShapeClassTemperature)[y], y the conditioning class: in
// [0, 1], near 1 when the image clearly shows the right shape, 1/K for a blank image.
class ShapeClassReward : public ImageRewardFn {
 public:
  ShapeClassReward(int64_t image_size, int64_t num_classes);
  std::vector<double> score(const torch::Tensor& images, const std::vector<int64_t>& class_labels) override;
  std::string name() const override { return "shape_class"; }

 private:
  ShapeClassifier classifier_;
};

}  // namespace tandem::rewards
