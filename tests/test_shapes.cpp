// The procedural shapes dataset: determinism, value range, geometry, labels, option checks.
#include <catch2/catch.hpp>

#include <cmath>

#include "common/error.h"
#include "core/tasks/shapes.h"

using namespace tandem;
using namespace tandem::tasks;

TEST_CASE("shapes: image k is a pure function of (seed, k)", "[shapes]") {
  const ShapesDataset a({16, 3, 8, 42}), b({16, 3, 8, 42}), other({16, 3, 8, 43});
  const ShapesBatch x = a.batch(0, 12), y = b.batch(0, 12);
  CHECK(torch::equal(x.images, y.images));
  CHECK(torch::equal(x.labels, y.labels));
  CHECK_FALSE(torch::equal(x.images, other.batch(0, 12).images));
  // A window of the stream is the same images however it is cut.
  const ShapesBatch tail = a.batch(5, 7);
  CHECK(torch::equal(tail.images, x.images.slice(0, 5)));
  CHECK(torch::equal(tail.labels, x.labels.slice(0, 5)));
  CHECK(a.batch(3, 0).images.sizes() == std::vector<int64_t>{0, 3, 16, 16});
}

TEST_CASE("shapes: shapes, dtype, value range and labels", "[shapes]") {
  for (const int64_t channels : {3, 1}) {
    const ShapesDataset d({32, channels, 4, 1});
    const ShapesBatch x = d.batch(0, 400);
    CHECK(x.images.sizes() == std::vector<int64_t>{400, channels, 32, 32});
    CHECK(x.images.scalar_type() == torch::kFloat32);
    CHECK(x.labels.scalar_type() == torch::kInt64);
    CHECK(x.images.min().item<double>() >= -1.0);
    CHECK(x.images.max().item<double>() <= 1.0);
    for (int64_t k = 0; k < 4; ++k) {  // uniform labels: 100 expected per class
      const int64_t count = (x.labels == k).sum().item<int64_t>();
      CHECK(count > 60);
      CHECK(count < 140);
    }
  }
}

TEST_CASE("shapes: the border shows the background at the smallest supported geometry", "[shapes]") {
  const ShapesDataset d({16, 3, 8, 7});
  for (int64_t k = 0; k < 300; ++k) {
    const ShapeParams p = d.params(k);
    const torch::Tensor cover = shape_coverage(p.label, p.cx, p.cy, p.radius, 16);  // (H, W)
    INFO("image " << k << " (" << shape_name(p.label) << ")");
    CHECK(cover.select(0, 0).max().item<double>() == 0.0);
    CHECK(cover.select(0, 15).max().item<double>() == 0.0);
    CHECK(cover.select(1, 0).max().item<double>() == 0.0);
    CHECK(cover.select(1, 15).max().item<double>() == 0.0);
    CHECK(cover.sum().item<double>() > 5.0);  // and the shape is there
  }
}

TEST_CASE("shapes: coverage is area-accurate and renders the colours given", "[shapes]") {
  const double r = 10.0;
  const torch::Tensor circle = shape_coverage(0, 32, 32, r, 64);
  CHECK(circle.sum().item<double>() == Approx(M_PI * r * r).epsilon(0.01));
  const torch::Tensor square = shape_coverage(1, 32, 32, r, 64);
  CHECK(square.sum().item<double>() == Approx(std::pow(1.6 * r, 2)).epsilon(0.01));
  ShapeParams p;
  p.label = 1;
  p.cx = p.cy = 8;
  p.radius = 4;
  p.color = {1.0, 0.0, 0.5};
  p.background = {0.0, 0.2, 0.0};
  const torch::Tensor img = render_shape(p, 16, 3);  // (3, 16, 16)
  CHECK(img[0][8][8].item<double>() == Approx(1.0));
  CHECK(img[2][8][8].item<double>() == Approx(0.0));
  CHECK(img[1][0][0].item<double>() == Approx(-0.6));
  const torch::Tensor grey = render_shape(p, 16, 1);
  CHECK(grey[0][8][8].item<double>() == Approx((0.299 + 0.114 * 0.5) * 2 - 1));
}

TEST_CASE("shapes: class names and option errors naming the recipe key", "[shapes]") {
  CHECK(shape_name(0) == "circle");
  CHECK(shape_name(3) == "cross");
  CHECK(shape_name(kNumShapeKinds - 1) == "frame");
  CHECK_THROWS_AS(shape_name(kNumShapeKinds), std::out_of_range);
  CHECK_THROWS_WITH(ShapesDataset({16, 3, 9, 0}), Catch::Contains("tracks.image.model.num_classes"));
  CHECK_THROWS_AS(ShapesDataset({16, 2, 4, 0}), UserError);
  CHECK_THROWS_WITH(ShapesDataset({16, 2, 4, 0}), Catch::Contains("tracks.image.model.channels"));
  CHECK_THROWS_WITH(ShapesDataset({4, 3, 4, 0}), Catch::Contains("tracks.image.model.image_size"));
}
