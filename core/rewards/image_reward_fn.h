// The image track's reward interface: a batch of generated images with their conditioning
// classes in, one finite score per image out. Built-ins live in image_rewards.h and
// shape_classifier.h; make_image_reward() maps the recipe's names to them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::rewards {

class ImageRewardFn {
 public:
  virtual ~ImageRewardFn() = default;
  // images (B, C, H, W) with values in [-1, 1] (any float dtype or device); class_labels (B).
  virtual std::vector<double> score(const torch::Tensor& images, const std::vector<int64_t>& class_labels) = 0;
  virtual std::string name() const = 0;
};

// Throws std::invalid_argument unless images is (B, C, H, W) and class_labels has B entries.
void check_image_batch(const torch::Tensor& images, const std::vector<int64_t>& class_labels);

}  // namespace tandem::rewards
