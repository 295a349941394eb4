// 8-bit conversion, JPEG encoding and PNG grids over stb_image_write (Debian's libstb, or the
// header compiled by core/stb_image_impl.cpp where only the header is installed).
#include "core/io/image_io.h"

#include <stb_image_write.h>

#include <stdexcept>

namespace tandem {

namespace {

void check_image(const torch::Tensor& image) {
  TORCH_CHECK(image.dim() == 3 && (image.size(0) == 1 || image.size(0) == 3),
              "expected an image (C, H, W) with C = 1 or 3, got ", image.sizes());
}

void append_bytes(void* context, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(context);
  const auto* bytes = static_cast<const uint8_t*>(data);
  out->insert(out->end(), bytes, bytes + size);
}

}  // namespace

std::vector<uint8_t> to_pixels(const torch::Tensor& image) {
  check_image(image);
  const torch::Tensor x = torch::nan_to_num(image.detach().to(torch::kCPU, torch::kFloat32), 0.0);  // (C, H, W)
  const torch::Tensor bytes =
      ((x + 1) * 127.5).round().clamp(0, 255).to(torch::kUInt8).permute({1, 2, 0}).contiguous();  // (H, W, C)
  const uint8_t* p = bytes.data_ptr<uint8_t>();
  return std::vector<uint8_t>(p, p + bytes.numel());
}

std::vector<uint8_t> encode_jpeg(const torch::Tensor& image, int quality) {
  TORCH_CHECK(quality >= 1 && quality <= 100, "JPEG quality must be in [1, 100], got ", quality);
  const std::vector<uint8_t> pixels = to_pixels(image);
  std::vector<uint8_t> out;
  const int c = static_cast<int>(image.size(0)), h = static_cast<int>(image.size(1)),
            w = static_cast<int>(image.size(2));
  if (!stbi_write_jpg_to_func(append_bytes, &out, w, h, c, pixels.data(), quality))
    throw std::runtime_error("JPEG encoding failed");
  return out;
}

torch::Tensor image_grid(const torch::Tensor& images, int64_t nrow, int64_t padding) {
  TORCH_CHECK(images.dim() == 4 && images.size(0) >= 1, "expected images (B, C, H, W) with B >= 1, got ",
              images.sizes());
  TORCH_CHECK(nrow >= 1 && padding >= 0, "image_grid: nrow must be >= 1 and padding >= 0");
  const int64_t b = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  const int64_t cols = std::min(nrow, b), rows = (b + cols - 1) / cols;
  torch::Tensor grid = torch::ones({c, rows * (h + padding) + padding, cols * (w + padding) + padding},
                                   images.options().device(torch::kCPU));  // (C, H', W') white
  for (int64_t k = 0; k < b; ++k) {
    const int64_t top = (k / cols) * (h + padding) + padding, left = (k % cols) * (w + padding) + padding;
    grid.slice(1, top, top + h).slice(2, left, left + w).copy_(images[k]);
  }
  return grid;
}

void write_png_grid(const std::string& path, const torch::Tensor& images, int64_t nrow, int64_t padding) {
  const torch::Tensor grid = image_grid(images, nrow, padding);  // (C, H', W')
  const std::vector<uint8_t> pixels = to_pixels(grid);
  const int c = static_cast<int>(grid.size(0)), h = static_cast<int>(grid.size(1)), w = static_cast<int>(grid.size(2));
  if (!stbi_write_png(path.c_str(), w, h, c, pixels.data(), w * c))
    throw std::runtime_error("cannot write PNG " + path);
}

}  // namespace tandem
