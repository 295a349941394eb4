// Procedural coloured shapes: geometry in units of the shape's radius, 4x4 supersampled coverage,
// colours from HSV so every hue appears with the same brightness range.
#include "core/tasks/shapes.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "common/error.h"
#include "core/io/image_io.h"
#include "core/tasks/det_rng.h"

namespace tandem::tasks {

namespace {

constexpr int64_t kSupersample = 4;
constexpr uint64_t kShapesStreamTag = 0x5348415045530001ull;  // "SHAPES" + version: the stream's salt
const char* const kShapeNames[kNumShapeKinds] = {"circle", "square",  "triangle", "cross",
                                                 "ring",   "diamond", "saltire",  "frame"};

// Whether (u, v), in units of the radius relative to the centre (v grows downwards), is inside.
bool inside(ShapeKind kind, double u, double v) {
  const double au = std::abs(u), av = std::abs(v);
  switch (kind) {
    case ShapeKind::kCircle:
      return u * u + v * v <= 1.0;
    case ShapeKind::kSquare:
      return au <= 0.8 && av <= 0.8;
    case ShapeKind::kTriangle:
      return v >= -0.9 && v <= 0.75 && au <= 0.95 * (v + 0.9) / 1.65;  // apex up
    case ShapeKind::kCross:
      return (au <= 0.3 && av <= 0.95) || (av <= 0.3 && au <= 0.95);
    case ShapeKind::kRing: {
      const double r2 = u * u + v * v;
      return r2 <= 1.0 && r2 >= 0.36;
    }
    case ShapeKind::kDiamond:
      return au + av <= 1.0;
    case ShapeKind::kSaltire: {  // the cross turned by 45 degrees, slightly thinner arms
      const double a = std::abs(u + v) / std::sqrt(2.0), b = std::abs(u - v) / std::sqrt(2.0);
      return (a <= 0.25 && b <= 0.95) || (b <= 0.25 && a <= 0.95);
    }
    case ShapeKind::kFrame: {
      const double m = std::max(au, av);
      return m <= 0.85 && m >= 0.5;
    }
  }
  return false;
}

double uniform(DetRng& rng, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(rng.next() >> 11) * 0x1.0p-53;
}

std::array<double, 3> hsv_to_rgb(double h, double s, double v) {
  const double h6 = h * 6.0;
  const int sector = static_cast<int>(std::floor(h6)) % 6;
  const double f = h6 - std::floor(h6);
  const double p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  switch (sector) {
    case 0:
      return {v, t, p};
    case 1:
      return {q, v, p};
    case 2:
      return {p, v, t};
    case 3:
      return {p, q, v};
    case 4:
      return {t, p, v};
    default:
      return {v, p, q};
  }
}

}  // namespace

std::string shape_name(int64_t label) {
  if (label < 0 || label >= kNumShapeKinds) throw std::out_of_range("no shape class " + std::to_string(label));
  return kShapeNames[label];
}

torch::Tensor shape_coverage(int64_t label, double cx, double cy, double radius, int64_t image_size) {
  const ShapeKind kind = static_cast<ShapeKind>(label);
  std::vector<double> cover(static_cast<size_t>(image_size * image_size), 0.0);
  const double step = 1.0 / kSupersample, weight = 1.0 / (kSupersample * kSupersample);
  for (int64_t i = 0; i < image_size; ++i)
    for (int64_t j = 0; j < image_size; ++j) {
      double c = 0;
      for (int64_t si = 0; si < kSupersample; ++si)
        for (int64_t sj = 0; sj < kSupersample; ++sj) {
          const double y = i + (si + 0.5) * step, x = j + (sj + 0.5) * step;
          if (inside(kind, (x - cx) / radius, (y - cy) / radius)) c += weight;
        }
      cover[static_cast<size_t>(i * image_size + j)] = c;
    }
  return torch::tensor(cover, torch::kFloat64).view({image_size, image_size});  // (H, W)
}

torch::Tensor render_shape(const ShapeParams& p, int64_t image_size, int64_t channels) {
  const torch::Tensor alpha = shape_coverage(p.label, p.cx, p.cy, p.radius, image_size);  // (H, W)
  std::vector<torch::Tensor> planes;
  for (int64_t c = 0; c < channels; ++c) {
    const double fg = channels == 1 ? luma(p.color) : p.color[static_cast<size_t>(c)];
    const double bg = channels == 1 ? luma(p.background) : p.background[static_cast<size_t>(c)];
    planes.push_back(bg + (fg - bg) * alpha);  // (H, W) in [0, 1]
  }
  return (torch::stack(planes) * 2 - 1).to(torch::kFloat32);  // (C, H, W) in [-1, 1]
}

void validate_shapes_options(const ShapesOptions& o) {
  const std::string key = "tracks.image.model.";
  if (o.num_classes < 1 || o.num_classes > kNumShapeKinds)
    throw UserError(key + "num_classes: the shapes task has " + std::to_string(kNumShapeKinds) + " classes, got " +
                    std::to_string(o.num_classes));
  if (o.channels != 1 && o.channels != 3)
    throw UserError(key + "channels: the shapes task draws 3 (RGB) or 1 (grey) channels, got " +
                    std::to_string(o.channels));
  if (o.image_size < kMinShapeImageSize)
    throw UserError(key + "image_size: the shapes task needs at least " + std::to_string(kMinShapeImageSize) +
                    " pixels, got " + std::to_string(o.image_size));
}

ShapesDataset::ShapesDataset(const ShapesOptions& options) : options_(options) { validate_shapes_options(options); }

ShapeParams ShapesDataset::params(int64_t index) const {
  DetRng rng(hash_combine(hash_combine(kShapesStreamTag, options_.seed), static_cast<uint64_t>(index)));
  const double s = static_cast<double>(options_.image_size);
  ShapeParams p;
  p.label = static_cast<int64_t>(rng.below(static_cast<uint64_t>(options_.num_classes)));
  p.radius = uniform(rng, kMinRadius, kMaxRadius) * s;
  p.cx = s / 2 + uniform(rng, -kMaxOffset, kMaxOffset) * s;
  p.cy = s / 2 + uniform(rng, -kMaxOffset, kMaxOffset) * s;
  p.color = hsv_to_rgb(uniform(rng, 0, 1), uniform(rng, 0.6, 1.0), uniform(rng, 0.75, 1.0));
  const double grey = uniform(rng, 0.0, 0.2);
  for (double& c : p.background) c = std::clamp(grey + uniform(rng, -0.03, 0.03), 0.0, 1.0);
  return p;
}

ShapesBatch ShapesDataset::batch(int64_t first, int64_t count) const {
  std::vector<torch::Tensor> images;
  std::vector<int64_t> labels;
  for (int64_t k = first; k < first + count; ++k) {
    const ShapeParams p = params(k);
    images.push_back(render_shape(p, options_.image_size, options_.channels));
    labels.push_back(p.label);
  }
  if (images.empty())
    return {torch::empty({0, options_.channels, options_.image_size, options_.image_size}),
            torch::empty({0}, torch::kInt64)};
  return {torch::stack(images), torch::tensor(labels, torch::kInt64)};  // (B, C, H, W), (B)
}

}  // namespace tandem::tasks
