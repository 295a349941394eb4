// Positions, mask and patch maps of the unified sequence; all built with broadcast comparisons on
// the lengths' device, no host loop over rows.
#include "models/unified/sequence.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace tandem::models {

namespace {

torch::Tensor checked_lengths(const torch::Tensor& text_lengths, int64_t text_width) {
  if (text_lengths.dim() != 1) throw std::invalid_argument("unified: text_lengths must be (B)");
  const torch::Tensor len = text_lengths.to(torch::kInt64);  // (B)
  if (len.numel() > 0 && (len.min().item<int64_t>() < 0 || len.max().item<int64_t>() > text_width))
    throw std::invalid_argument("unified: text_lengths must lie in [0, " + std::to_string(text_width) + "]");
  return len;
}

}  // namespace

torch::Tensor unified_positions(const torch::Tensor& text_lengths, int64_t text_width, int64_t num_patches) {
  const torch::Tensor len = checked_lengths(text_lengths, text_width);  // (B)
  const int64_t b = len.size(0);
  const auto idx = torch::TensorOptions().dtype(torch::kInt64).device(len.device());
  const torch::Tensor text = torch::arange(text_width, idx).unsqueeze(0).expand({b, text_width});  // (B, T_text)
  const torch::Tensor image = len.unsqueeze(1).expand({b, num_patches});                           // (B, N)
  return torch::cat({text, image}, 1);                                                             // (B, T)
}

torch::Tensor unified_attention_mask(const torch::Tensor& text_lengths, int64_t text_width, int64_t num_patches) {
  const torch::Tensor len = checked_lengths(text_lengths, text_width).view({-1, 1, 1});  // (B, 1, 1)
  const int64_t t = text_width + num_patches;
  const auto idx = torch::TensorOptions().dtype(torch::kInt64).device(len.device());
  const torch::Tensor q = torch::arange(t, idx).view({1, t, 1});  // (1, T, 1) query slot
  const torch::Tensor k = torch::arange(t, idx).view({1, 1, t});  // (1, 1, T) key slot
  const torch::Tensor q_text = q < text_width, k_text = k < text_width;
  const torch::Tensor k_real = k_text.logical_not() | (k < len);  // (B, 1, T): real text or a patch
  const torch::Tensor text_rule = q_text & k_text & (k <= q);     // (1, T, T): causal text, no image keys
  const torch::Tensor image_rule = q_text.logical_not();          // (1, T, 1): a patch sees everything real
  const torch::Tensor allowed = (k_real & (text_rule | image_rule)) | (q == k);  // (B, T, T)
  return allowed.unsqueeze(1);                                                   // (B, 1, T, T)
}

torch::Tensor patchify(const torch::Tensor& x, int64_t p) {
  const int64_t b = x.size(0), c = x.size(1), gh = x.size(2) / p, gw = x.size(3) / p;
  // (B, C, gh, p, gw, p) -> (B, gh, gw, p, p, C) -> (B, N, p*p*C)
  return x.reshape({b, c, gh, p, gw, p}).permute({0, 2, 4, 3, 5, 1}).reshape({b, gh * gw, p * p * c});
}

torch::Tensor unpatchify(const torch::Tensor& tokens, int64_t p, int64_t channels) {
  const int64_t b = tokens.size(0), n = tokens.size(1);
  const auto g = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(n))));
  if (g * g != n) throw std::invalid_argument("unpatchify: " + std::to_string(n) + " patches is not a square grid");
  // (B, gh, gw, p, p, C) -> (B, C, gh, p, gw, p) -> (B, C, H, W)
  return tokens.reshape({b, g, g, p, p, channels}).permute({0, 5, 1, 3, 2, 4}).reshape({b, channels, g * p, g * p});
}

}  // namespace tandem::models
