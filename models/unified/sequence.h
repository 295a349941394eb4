// The layout of one unified sequence: [text tokens (left-aligned, padded to T_text)] followed,
// for image generation, by [the N patch tokens of one image]; its RoPE positions, its attention
// mask, and the patchify / unpatchify maps between latents and patch tokens.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace tandem::models {

// Positions (B, T) int64, T = text_width + num_patches. Text slot j is at position j (padding
// slots too; nothing reads them). Every patch of row b sits at position text_lengths[b], the slot
// the next token would take: the patches are "one step after the prompt" for RoPE, relative
// distance 0 among themselves (their 2-D layout comes from the learned patch positions), and the
// padded width of the batch never changes a real token's rotation.
torch::Tensor unified_positions(const torch::Tensor& text_lengths, int64_t text_width, int64_t num_patches);

// The attention mask, (B, 1, T, T) bool, true where query i may attend to key j:
//   text query i (i < text_width):  key j is real text (j < text_lengths[b]) and j <= i (causal);
//                                   never an image key (text never attends to a following image);
//   image query i (i >= text_width): every real text key and every patch of the same image
//                                   (bidirectional within the image);
//   and every query attends to itself, so a padding row has one key and nothing is NaN.
// No query attends to a padding key other than itself, so padding influences nothing real.
// text_lengths (B) int64 in [0, text_width].
torch::Tensor unified_attention_mask(const torch::Tensor& text_lengths, int64_t text_width, int64_t num_patches);

// x (B, C, H, W) -> (B, N, p*p*C), N = (H/p) * (W/p) row-major over the patch grid; within a
// patch the values run (row, column, channel), the layout models/dit unpatchifies.
torch::Tensor patchify(const torch::Tensor& x, int64_t patch_size);
// The inverse: tokens (B, N, p*p*C) -> (B, C, g*p, g*p), g = sqrt(N) (square images).
torch::Tensor unpatchify(const torch::Tensor& tokens, int64_t patch_size, int64_t channels);

}  // namespace tandem::models
