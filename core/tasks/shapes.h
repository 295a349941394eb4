// The image track's built-in data: small procedurally drawn images of one coloured shape on a dark
// background, the class label being the shape. Image k is a pure function of (seed, k), so the
// set needs no files and rectified-flow pretraining can draw any number of them.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <string>

namespace tandem::tasks {

// Class k draws shape k (the first num_classes of these).
enum class ShapeKind { kCircle, kSquare, kTriangle, kCross, kRing, kDiamond, kSaltire, kFrame };
inline constexpr int64_t kNumShapeKinds = 8;
inline constexpr int64_t kMinShapeImageSize = 8;  // smaller images cannot tell the shapes apart

std::string shape_name(int64_t label);  // "circle", ...; throws std::out_of_range

// Geometry ranges as fractions of image_size: the shape's half-extent ("radius") and the offset of
// its centre from the image centre. Together they keep every shape one pixel or more off the
// border at 16x16, so the border shows the background (the shape classifier relies on it).
inline constexpr double kMinRadius = 0.24;
inline constexpr double kMaxRadius = 0.34;
inline constexpr double kMaxOffset = 0.09;

struct ShapeParams {
  int64_t label = 0;
  double cx = 0, cy = 0;               // centre in pixels; pixel (i, j) covers [j, j+1) x [i, i+1)
  double radius = 0;                   // half-extent in pixels
  std::array<double, 3> color{};       // RGB in [0, 1]: a saturated, bright hue
  std::array<double, 3> background{};  // RGB in [0, 1]: a dark, nearly grey tone
};

// Anti-aliased coverage in [0, 1] of shape `label` (4x4 supersampling) -> (H, W) float64.
torch::Tensor shape_coverage(int64_t label, double cx, double cy, double radius, int64_t image_size);

// The shape over its background -> (C, H, W) float32 in [-1, 1]; channels 3 (RGB) or 1 (luma).
torch::Tensor render_shape(const ShapeParams& params, int64_t image_size, int64_t channels);

struct ShapesOptions {
  int64_t image_size = 16;
  int64_t channels = 3;
  int64_t num_classes = 4;
  uint64_t seed = 0;
};

// Throws UserError naming the recipe key (tracks.image.model.*) when the shapes task cannot serve
// the model: num_classes above kNumShapeKinds, channels not 1 or 3, image_size below the minimum.
void validate_shapes_options(const ShapesOptions& options);

struct ShapesBatch {
  torch::Tensor images;  // (B, C, H, W) float32 in [-1, 1]
  torch::Tensor labels;  // (B) int64 in [0, num_classes)
};

class ShapesDataset {
 public:
  explicit ShapesDataset(const ShapesOptions& options);  // validates (UserError)

  // Image `index`'s parameters: label uniform over the classes, geometry and colours uniform in
  // their ranges; a pure function of (seed, index).
  ShapeParams params(int64_t index) const;
  // Images first .. first + count - 1.
  ShapesBatch batch(int64_t first, int64_t count) const;
  const ShapesOptions& options() const { return options_; }

 private:
  ShapesOptions options_;
};

}  // namespace tandem::tasks
