// Image rewards: JPEG (in)compressibility, brightness, colour target, the shape-class template
// classifier (accuracy on clean generated shapes) and the name table.
#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>

#include <iostream>

#include "common/error.h"
#include "core/config/config.h"
#include "core/io/image_io.h"
#include "core/rewards/image_rewards.h"
#include "core/rewards/shape_classifier.h"
#include "core/tasks/shapes.h"

using namespace tandem;
using namespace tandem::rewards;

namespace {

std::vector<int64_t> zeros(int64_t n) { return std::vector<int64_t>(static_cast<size_t>(n), 0); }

std::vector<int64_t> to_vector(const torch::Tensor& labels) {
  return std::vector<int64_t>(labels.data_ptr<int64_t>(), labels.data_ptr<int64_t>() + labels.numel());
}

}  // namespace

TEST_CASE("jpeg rewards: a flat image is more compressible than noise", "[image_rewards]") {
  at::Generator gen = at::detail::createCPUGenerator(3);
  const torch::Tensor flat = torch::full({1, 3, 32, 32}, 0.2);
  const torch::Tensor noise = torch::rand({1, 3, 32, 32}, gen) * 2 - 1;
  const torch::Tensor images = torch::cat({flat, noise});  // (2, 3, 32, 32)
  JpegSizeReward comp(true), incomp(false);
  const std::vector<double> c = comp.score(images, zeros(2)), i = incomp.score(images, zeros(2));
  CHECK(c[0] > c[1]);
  CHECK(i[1] > i[0]);
  // The unit is DDPO's: kilobytes of the quality-95 JPEG.
  CHECK(c[1] == -static_cast<double>(encode_jpeg(noise[0], 95).size()) / 1000.0);
  CHECK(i[0] == -c[0]);
  CHECK(comp.name() == "jpeg_compressibility");
  CHECK(incomp.name() == "jpeg_incompressibility");
}

TEST_CASE("brightness and color_target rewards", "[image_rewards]") {
  const torch::Tensor images = torch::stack(
      {torch::full({3, 4, 4}, 1.0), torch::full({3, 4, 4}, -1.0), torch::zeros({3, 4, 4})});  // white, black, mid grey
  BrightnessReward bright;
  const std::vector<double> b = bright.score(images, zeros(3));
  CHECK(b[0] == Approx(1.0));
  CHECK(b[1] == Approx(0.0).margin(1e-15));
  CHECK(b[2] == Approx(0.5));
  CHECK(bright.score(images.slice(1, 0, 1), zeros(3))[0] == Approx(1.0));  // one channel

  ColorTargetReward red({1.0, 0.0, 0.0});
  torch::Tensor pure_red = -torch::ones({1, 3, 4, 4});
  pure_red[0][0].fill_(1.0);
  CHECK(red.score(pure_red, zeros(1))[0] == Approx(0.0).margin(1e-15));
  const std::vector<double> r = red.score(images, zeros(3));
  CHECK(r[0] == Approx(-std::sqrt(2.0)));  // white: (1, 1, 1) vs (1, 0, 0)
  CHECK(r[1] == Approx(-1.0));             // black
  CHECK_THROWS_AS(red.score(images, zeros(2)), std::invalid_argument);

  // Past white scores as white, as its PNG shows it; NaN as mid grey: the range stays [0, 1]
  // (brightness) and [-sqrt(3), 0] (colour target), and a policy cannot earn reward off the image.
  torch::Tensor odd = torch::stack({torch::full({3, 4, 4}, 3.0), torch::full({3, 4, 4}, -7.0),
                                    torch::full({3, 4, 4}, std::nan(""))});  // (3, 3, 4, 4)
  // Approx: the luma weights' sum 0.299 + 0.587 + 0.114 comes out of oneMKL's GEMV as 1 or 1 - 2^-53
  // depending on the host's code path (an AMD host gave the latter).
  const std::vector<double> o = bright.score(odd, zeros(3));
  CHECK(o[0] == Approx(1.0).epsilon(1e-12));
  CHECK(o[1] == Approx(0.0).margin(1e-15));
  CHECK(o[2] == Approx(0.5).epsilon(1e-12));
  CHECK(red.score(odd, zeros(3))[0] == Approx(-std::sqrt(2.0)));
}

TEST_CASE("shape classifier: accuracy on clean generated shapes", "[image_rewards][shapes]") {
  for (const auto& [size, classes, channels] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{16, 4, 3}, {16, 8, 3}, {32, 8, 3}, {16, 8, 1}, {48, 8, 3}}) {
    const tasks::ShapesDataset data({size, channels, classes, 2024});
    const tasks::ShapesBatch batch = data.batch(0, 400);
    const ShapeClassifier classifier(size, classes);
    const std::vector<int64_t> predicted = classifier.classify(batch.images), truth = to_vector(batch.labels);
    int64_t correct = 0;
    for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i];
    const double accuracy = static_cast<double>(correct) / static_cast<double>(truth.size());
    std::cout << "shape classifier " << size << "x" << size << "x" << channels << ", " << classes << " classes, "
              << classifier.templates_per_class() << " templates/class: accuracy " << accuracy
              << " on 400 clean images\n";
    INFO(size << "x" << size << " " << classes << " classes");
    CHECK(accuracy >= 0.98);
  }
}

TEST_CASE("shape_class reward: high for the right class, low for a wrong one, 1/K when blank", "[image_rewards]") {
  const tasks::ShapesDataset data({16, 3, 4, 5});
  const tasks::ShapesBatch batch = data.batch(0, 200);
  ShapeClassReward reward(16, 4);
  const std::vector<int64_t> truth = to_vector(batch.labels);
  std::vector<int64_t> wrong;
  for (const int64_t y : truth) wrong.push_back((y + 1) % 4);
  double right_mean = 0, wrong_mean = 0;
  for (const double r : reward.score(batch.images, truth)) right_mean += r / 200;
  for (const double r : reward.score(batch.images, wrong)) wrong_mean += r / 200;
  std::cout << "shape_class reward on clean shapes: " << right_mean << " (right class), " << wrong_mean
            << " (wrong class)\n";
  CHECK(right_mean > 0.9);
  CHECK(wrong_mean < 0.05);
  for (const double r : reward.score(torch::zeros({2, 3, 16, 16}), {0, 3})) CHECK(r == Approx(0.25));
  CHECK_THROWS_AS(reward.score(batch.images.slice(0, 0, 1), {4}), std::invalid_argument);
}

TEST_CASE("make_image_reward builds every built-in name", "[image_rewards]") {
  const ImageRewardOptions options;
  for (const std::string& kind : image_reward_names()) {
    if (kind == "command") {  // the image track serves it with reward_process.h, not this factory
      CHECK_THROWS_AS(make_image_reward(kind, options), std::logic_error);
      continue;
    }
    const auto reward = make_image_reward(kind, options);
    CHECK(reward->name() == kind);
    const std::vector<double> scores = reward->score(torch::rand({2, 3, 16, 16}) * 2 - 1, {0, 1});
    CHECK(scores.size() == 2);
    for (const double s : scores) CHECK(std::isfinite(s));
  }
  CHECK_THROWS_WITH(make_image_reward("jpeg_compressability", options),
                    Catch::Contains("unknown image reward") && Catch::Contains("did you mean jpeg_compressibility?"));
}
