// JPEG size, brightness and colour-target rewards, and the image reward name table.
#include "core/rewards/image_rewards.h"

#include <cmath>
#include <stdexcept>

#include "common/error.h"
#include "core/config/config.h"
#include "core/config/name_tables.h"
#include "core/io/image_io.h"
#include "core/rewards/shape_classifier.h"

namespace tandem::rewards {

namespace {

// (B, C, H, W) -> (B, C) mean of each channel mapped to [0, 1], float64 on the CPU. The pixels
// are clamped to [-1, 1] first, as the PNG and JPEG encoders clamp them: a policy must not earn
// reward for values past white that the saved image cannot show (NaN counts as 0).
torch::Tensor mean_colors(const torch::Tensor& images) {
  return (images.detach().to(torch::kCPU, torch::kFloat64).nan_to_num(0).clamp(-1, 1).mean({2, 3}) + 1) / 2;
}

std::vector<double> to_vector(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

}  // namespace

void check_image_batch(const torch::Tensor& images, const std::vector<int64_t>& class_labels) {
  if (images.dim() != 4)
    throw std::invalid_argument("image reward: expected images (B, C, H, W), got " + std::to_string(images.dim()) +
                                " dims");
  if (static_cast<int64_t>(class_labels.size()) != images.size(0))
    throw std::invalid_argument("image reward: " + std::to_string(images.size(0)) + " images but " +
                                std::to_string(class_labels.size()) + " class labels");
}

JpegSizeReward::JpegSizeReward(bool compressible, int quality) : compressible_(compressible), quality_(quality) {}

std::string JpegSizeReward::name() const { return compressible_ ? "jpeg_compressibility" : "jpeg_incompressibility"; }

std::vector<double> JpegSizeReward::score(const torch::Tensor& images, const std::vector<int64_t>& class_labels) {
  check_image_batch(images, class_labels);
  std::vector<double> out;
  for (int64_t b = 0; b < images.size(0); ++b) {
    const double kb = static_cast<double>(encode_jpeg(images[b], quality_).size()) / 1000.0;
    out.push_back(compressible_ ? -kb : kb);
  }
  return out;
}

std::vector<double> BrightnessReward::score(const torch::Tensor& images, const std::vector<int64_t>& class_labels) {
  check_image_batch(images, class_labels);
  const torch::Tensor m = mean_colors(images);  // (B, C)
  if (m.size(1) == 1) return to_vector(m.select(1, 0));
  if (m.size(1) != 3) throw std::invalid_argument("brightness: images must have 1 or 3 channels");
  const torch::Tensor w = torch::tensor({kLumaWeights[0], kLumaWeights[1], kLumaWeights[2]}, torch::kFloat64);
  return to_vector(m.matmul(w));  // (B): the mean of the luma is the luma of the mean colour
}

ColorTargetReward::ColorTargetReward(const std::array<double, 3>& target) : target_(target) {}

std::vector<double> ColorTargetReward::score(const torch::Tensor& images, const std::vector<int64_t>& class_labels) {
  check_image_batch(images, class_labels);
  const torch::Tensor m = mean_colors(images);  // (B, C)
  torch::Tensor target;
  if (m.size(1) == 1)
    target = torch::tensor({luma(target_)}, torch::kFloat64);
  else if (m.size(1) == 3)
    target = torch::tensor({target_[0], target_[1], target_[2]}, torch::kFloat64);
  else
    throw std::invalid_argument("color_target: images must have 1 or 3 channels");
  return to_vector(-(m - target).norm(2, {1}));  // (B)
}

namespace {

struct ImageReward {
  const char* name;
  std::unique_ptr<ImageRewardFn> (*make)(const ImageRewardOptions& o);  // null: served by the track
};

const ImageReward kImageRewards[] = {
    {"jpeg_compressibility",
     [](const ImageRewardOptions& o) -> std::unique_ptr<ImageRewardFn> {
       return std::make_unique<JpegSizeReward>(true, o.jpeg_quality);
     }},
    {"jpeg_incompressibility",
     [](const ImageRewardOptions& o) -> std::unique_ptr<ImageRewardFn> {
       return std::make_unique<JpegSizeReward>(false, o.jpeg_quality);
     }},
    {"brightness",
     [](const ImageRewardOptions&) -> std::unique_ptr<ImageRewardFn> { return std::make_unique<BrightnessReward>(); }},
    {"color_target",
     [](const ImageRewardOptions& o) -> std::unique_ptr<ImageRewardFn> {
       return std::make_unique<ColorTargetReward>(o.color_target);
     }},
    {"shape_class",
     [](const ImageRewardOptions& o) -> std::unique_ptr<ImageRewardFn> {
       return std::make_unique<ShapeClassReward>(o.image_size, o.num_classes);
     }},
    // The external process (reward_process.h) scores the samples' PNG files; the image track
    // starts it itself, since it writes the files first.
    {"command", nullptr},
};

}  // namespace

const std::vector<std::string>& image_reward_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const ImageReward& r : kImageRewards) n.push_back(r.name);
    return n;
  }();
  return names;
}

std::unique_ptr<ImageRewardFn> make_image_reward(const std::string& kind, const ImageRewardOptions& o) {
  for (const ImageReward& r : kImageRewards)
    if (kind == r.name) {
      if (!r.make) throw std::logic_error("make_image_reward: '" + kind + "' is served by the image track");
      return r.make(o);
    }
  throw UserError(unknown_name_message("image reward", kind, image_reward_names()));
}

namespace {
const NameRegistrar kImageRewardNames(NameTable::kImageReward, image_reward_names());  // config/name_tables.h
}  // namespace

}  // namespace tandem::rewards
