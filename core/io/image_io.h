// Images out of the engine: [-1, 1] tensors to 8-bit pixels, JPEG bytes (the compressibility
// rewards) and PNG sample grids for the run directory, all through stb_image_write.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

// Rec. 601 luma of an RGB colour: what a single-channel image shows for it.
inline constexpr std::array<double, 3> kLumaWeights{0.299, 0.587, 0.114};
inline double luma(const std::array<double, 3>& rgb) {
  return kLumaWeights[0] * rgb[0] + kLumaWeights[1] * rgb[1] + kLumaWeights[2] * rgb[2];
}

// One image (C, H, W) with values in [-1, 1] (any float dtype or device; C is 1 or 3) -> H*W*C
// interleaved bytes round((x + 1) / 2 * 255), clamped to [0, 255]; NaN becomes mid-grey.
std::vector<uint8_t> to_pixels(const torch::Tensor& image);

// The image encoded as baseline JPEG at `quality` (1..100).
std::vector<uint8_t> encode_jpeg(const torch::Tensor& image, int quality);

// Tiles images (B, C, H, W) into one (C, H', W') image, `nrow` images per row (torchvision's
// make_grid convention) with `padding` pixels of white (+1) between and around them.
torch::Tensor image_grid(const torch::Tensor& images, int64_t nrow, int64_t padding = 2);

// image_grid() written as a PNG file. Throws std::runtime_error when the file cannot be written.
void write_png_grid(const std::string& path, const torch::Tensor& images, int64_t nrow, int64_t padding = 2);

}  // namespace tandem
