// Template-matching shape classifier and the shape_class reward; see shape_classifier.h.
#include "core/rewards/shape_classifier.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "core/tasks/shapes.h"

namespace tandem::rewards {

namespace {

constexpr double kGridSpacingPx = 0.75;  // template centres and radii at most this far apart

// Points covering [lo, hi] at most kGridSpacingPx apart (at least 3).
std::vector<double> grid(double lo, double hi) {
  const int64_t n = std::max<int64_t>(3, static_cast<int64_t>(std::ceil((hi - lo) / kGridSpacingPx)) + 1);
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(lo + (hi - lo) * static_cast<double>(i) / static_cast<double>(n - 1));
  return out;
}

// (N, P) rows -> zero-mean, unit-norm rows (a constant row stays zero).
torch::Tensor standardize(const torch::Tensor& rows) {
  const torch::Tensor centred = rows - rows.mean(1, true);
  return centred / centred.norm(2, {1}, true).clamp_min(1e-12);
}

}  // namespace

ShapeClassifier::ShapeClassifier(int64_t image_size, int64_t num_classes)
    : image_size_(image_size), work_size_(std::min(image_size, kShapeClassifierMaxSize)), num_classes_(num_classes) {
  if (num_classes < 1 || num_classes > tasks::kNumShapeKinds || image_size < tasks::kMinShapeImageSize)
    throw std::invalid_argument("ShapeClassifier: needs 1.." + std::to_string(tasks::kNumShapeKinds) +
                                " classes and images of at least " + std::to_string(tasks::kMinShapeImageSize) +
                                " pixels");
  const double s = static_cast<double>(work_size_);
  const std::vector<double> offsets = grid(-tasks::kMaxOffset * s, tasks::kMaxOffset * s);
  const std::vector<double> radii = grid(tasks::kMinRadius * s, tasks::kMaxRadius * s);
  std::vector<torch::Tensor> per_class;
  for (int64_t k = 0; k < num_classes; ++k) {
    std::vector<torch::Tensor> masks;
    for (const double r : radii)
      for (const double dy : offsets)
        for (const double dx : offsets)
          masks.push_back(tasks::shape_coverage(k, s / 2 + dx, s / 2 + dy, r, work_size_).flatten());  // (P)
    per_class.push_back(standardize(torch::stack(masks)));                                             // (T, P)
  }
  templates_ = torch::stack(per_class);  // (K, T, P)
}

torch::Tensor ShapeClassifier::class_scores(const torch::Tensor& images) const {
  TORCH_CHECK(images.dim() == 4 && images.size(2) == image_size_ && images.size(3) == image_size_,
              "ShapeClassifier: expected images (B, C, ", image_size_, ", ", image_size_, "), got ", images.sizes());
  torch::Tensor x = torch::nan_to_num(images.detach().to(torch::kCPU, torch::kFloat64), 0.0);  // (B, C, H, W)
  if (work_size_ != image_size_) x = torch::adaptive_avg_pool2d(x, {work_size_, work_size_});
  const int64_t b = x.size(0), w = work_size_;
  const torch::Tensor border = torch::cat(
      {x.select(2, 0), x.select(2, w - 1), x.select(3, 0).slice(2, 1, w - 1), x.select(3, w - 1).slice(2, 1, w - 1)},
      2);                                                                              // (B, C, 4w - 4)
  const torch::Tensor background = std::get<0>(border.median(2, true)).unsqueeze(3);   // (B, C, 1, 1)
  const torch::Tensor fg = (x - background).pow(2).sum(1).sqrt().reshape({b, w * w});  // (B, P)
  const torch::Tensor f = standardize(fg);                                             // (B, P)
  const int64_t k = templates_.size(0), t = templates_.size(1);
  const torch::Tensor sims = f.matmul(templates_.reshape({k * t, w * w}).t()).view({b, k, t});  // (B, K, T)
  return std::get<0>(sims.max(2));                                                              // (B, K)
}

std::vector<int64_t> ShapeClassifier::classify(const torch::Tensor& images) const {
  const torch::Tensor best = class_scores(images).argmax(1).contiguous();  // (B)
  return std::vector<int64_t>(best.data_ptr<int64_t>(), best.data_ptr<int64_t>() + best.numel());
}

ShapeClassReward::ShapeClassReward(int64_t image_size, int64_t num_classes) : classifier_(image_size, num_classes) {}

std::vector<double> ShapeClassReward::score(const torch::Tensor& images, const std::vector<int64_t>& class_labels) {
  check_image_batch(images, class_labels);
  const torch::Tensor p = torch::softmax(classifier_.class_scores(images) / kShapeClassTemperature, 1);  // (B, K)
  std::vector<double> out;
  for (size_t i = 0; i < class_labels.size(); ++i) {
    const int64_t y = class_labels[i];
    if (y < 0 || y >= classifier_.num_classes())
      throw std::invalid_argument("shape_class: class label " + std::to_string(y) + " outside [0, " +
                                  std::to_string(classifier_.num_classes()) + ")");
    out.push_back(p[static_cast<int64_t>(i)][y].item<double>());
  }
  return out;
}

}  // namespace tandem::rewards
