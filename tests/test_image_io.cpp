// 8-bit conversion, JPEG bytes and PNG grids, decoded back with stb_image.
#include <stb_image.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "core/io/image_io.h"

using namespace tandem;
namespace fs = std::filesystem;

TEST_CASE("to_pixels maps [-1, 1] to [0, 255], channel-interleaved", "[image_rewards]") {
  torch::Tensor img = torch::zeros({3, 1, 2});  // (C, H, W)
  img[0][0][0] = -1.0;
  img[1][0][0] = 1.0;
  img[2][0][0] = std::nan("");
  img[0][0][1] = 5.0;   // clamped
  img[1][0][1] = -0.5;  // 63.75 -> 64
  const std::vector<uint8_t> px = to_pixels(img);
  CHECK(px == std::vector<uint8_t>{0, 255, 128, 255, 64, 128});
  CHECK_THROWS(to_pixels(torch::zeros({2, 4, 4})));
}

TEST_CASE("encode_jpeg produces a JPEG of the image's size", "[image_rewards]") {
  const torch::Tensor img = torch::rand({3, 16, 24}) * 2 - 1;
  const std::vector<uint8_t> jpg = encode_jpeg(img, 95);
  REQUIRE(jpg.size() > 4);
  CHECK(jpg[0] == 0xFF);
  CHECK(jpg[1] == 0xD8);  // SOI marker
  int w = 0, h = 0, c = 0;
  unsigned char* data = stbi_load_from_memory(jpg.data(), static_cast<int>(jpg.size()), &w, &h, &c, 0);
  REQUIRE(data != nullptr);
  stbi_image_free(data);
  CHECK(w == 24);
  CHECK(h == 16);
  CHECK(c == 3);
}

TEST_CASE("write_png_grid writes a PNG that decodes to the grid", "[image_rewards]") {
  const fs::path path = fs::temp_directory_path() / ("tandem_grid_" + std::to_string(getpid()) + ".png");
  const torch::Tensor images = torch::rand({5, 3, 8, 8}) * 2 - 1;  // (B, C, H, W)
  write_png_grid(path.string(), images, 3);
  int w = 0, h = 0, c = 0;
  unsigned char* data = stbi_load(path.string().c_str(), &w, &h, &c, 0);
  REQUIRE(data != nullptr);
  // 3 columns x 2 rows of 8x8 with 2 pixels of padding around and between.
  CHECK(w == 3 * 10 + 2);
  CHECK(h == 2 * 10 + 2);
  CHECK(c == 3);
  const std::vector<uint8_t> first = to_pixels(images[0]), fifth = to_pixels(images[4]);
  auto at = [&](int y, int x, int ch) { return data[(y * w + x) * c + ch]; };
  CHECK(at(2, 2, 0) == first[0]);                              // image 0, pixel (0, 0)
  CHECK(at(2 + 7, 2 + 7, 2) == first[(7 * 8 + 7) * 3 + 2]);    // image 0, pixel (7, 7)
  CHECK(at(12 + 3, 12 + 5, 1) == fifth[(3 * 8 + 5) * 3 + 1]);  // image 4: row 1, column 1
  CHECK(at(0, 0, 0) == 255);                                   // padding is white
  CHECK(at(15, 25, 1) == 255);                                 // the empty sixth cell
  stbi_image_free(data);
  fs::remove(path);
  CHECK_THROWS_AS(write_png_grid("/nonexistent-dir/x.png", images, 3), std::runtime_error);
  // Padding 0 (what a command reward gets): the image alone, its own size, no white frame.
  write_png_grid(path.string(), images.slice(0, 0, 1), 1, /*padding=*/0);
  data = stbi_load(path.string().c_str(), &w, &h, &c, 0);
  REQUIRE(data != nullptr);
  CHECK(w == 8);
  CHECK(h == 8);
  CHECK(std::equal(first.begin(), first.end(), data));
  stbi_image_free(data);
  fs::remove(path);
}
