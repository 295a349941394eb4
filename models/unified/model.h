// A unified transformer that writes text and draws images with one shared trunk, in the spirit of
// Transfusion (Zhou et al. 2024): text tokens are embedded, image latents are patchified and
// linearly embedded, and one stack of pre-norm blocks (RMSNorm, RoPE attention, SwiGLU) runs over
// [text, patches] under the mask of sequence.h; an LM head reads the text positions and a
// velocity head the patch positions (rectified flow, the convention of models/dit:
// x_t = (1 - sigma) x0 + sigma noise, v = noise - x0). Departures from Transfusion: latents are
// embedded by a linear layer (no U-Net / VAE), one image per sequence and always after the text,
// and the timestep is simple additive conditioning (a sinusoidal embedding -> MLP added to every
// patch token, no adaLN), so the blocks are the same for both modalities.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>

#include "models/dit/dit_layers.h"
#include "models/layers/rms_norm.h"
#include "models/unified/config.h"
#include "models/unified/layers.h"

namespace tandem::models {

// One batch of unified sequences: text (left-aligned, padded) and optionally one image per row.
struct UnifiedInput {
  torch::Tensor text_ids;      // (B, T_text) int64; row b's tokens are [0, text_lengths[b]), then padding
  torch::Tensor text_lengths;  // (B) int64 in [0, T_text]; 0 = no prompt (unconditional image)
  torch::Tensor x_t;           // (B, C, H, W) noisy latents at time sigma, or undefined: text only
  torch::Tensor sigma;         // (B) flow time in [0, 1]; defined exactly when x_t is
  bool has_image() const { return x_t.defined(); }
};

struct UnifiedOutput {
  // (B, T_text, V) next-token logits in float32 (float64 for float64 models); at padding slots
  // they are finite but meaningless.
  torch::Tensor text_logits;
  torch::Tensor velocity;  // (B, C, H, W) in the model's dtype; undefined without an image
};

class UnifiedModelImpl : public torch::nn::Module {
 public:
  // Parameters are float32 (call ->to(dtype)). With init_seed every tensor is drawn from one
  // generator in parameter order: normal(0, kUnifiedInitStd) for matrices, embeddings and patch
  // positions, ones for norms, zeros for biases (the velocity head too: no zero start, unlike
  // DiT's adaLN-Zero, so a fresh model's velocity already depends on its inputs). Without it the
  // parameters keep LibTorch's default init (to be loaded, see weights.h).
  explicit UnifiedModelImpl(const UnifiedConfig& config, std::optional<uint64_t> init_seed = 0);

  // Text only: input_ids (B, T), lengths (B) -> logits (B, T, V); causal within each row.
  torch::Tensor text_logits(const torch::Tensor& input_ids, const torch::Tensor& lengths);
  // Image generation: the velocity of x_t (B, C, H, W) at sigma (B) given the prompts
  // prompt_ids (B, Tp) of prompt_lengths (B) (Tp = 0 or a length 0: unconditional) -> (B, C, H, W).
  torch::Tensor velocity(const torch::Tensor& prompt_ids, const torch::Tensor& prompt_lengths, const torch::Tensor& x_t,
                         const torch::Tensor& sigma);
  // Both heads in one pass over [text, patches]: what text_logits and velocity run. The text
  // logits equal a text-only forward's (text never sees the image), so one pass can train an LM
  // loss on the prompt and a flow loss on the image together.
  UnifiedOutput forward(const UnifiedInput& input);

  // The three stages of forward, public so tests can differentiate with respect to the input
  // embeddings or run the trunk under another mask:
  // (B, T, D) input embeddings, T = T_text + N (N = 0 without an image); checks the input.
  torch::Tensor embed(const UnifiedInput& input);
  // h (B, T, D), positions (B, T) int64, allowed (B, 1, T, T) bool -> final-normed (B, T, D).
  torch::Tensor trunk(const torch::Tensor& h, const torch::Tensor& positions, const torch::Tensor& allowed);
  // hidden (B, T_text + N, D) -> the text logits of the first text_width slots and, with an
  // image, the velocity of the rest.
  UnifiedOutput heads(const torch::Tensor& hidden, int64_t text_width, bool image);

  const UnifiedConfig& config() const { return config_; }
  torch::Dtype dtype() const { return norm->weight.scalar_type(); }
  torch::Device device() const { return norm->weight.device(); }

  // Parameter names are the module paths below and are the safetensors names (weights.h).
  torch::nn::Embedding embed_tokens{nullptr};  // (V, D)
  torch::nn::Linear patch_embed{nullptr};      // p*p*C -> D, with bias
  torch::Tensor pos_embed;                     // (N, D) learned 2-D patch positions (row-major grid)
  TimestepEmbedder t_embed{nullptr};           // sigma -> (D): sinusoid of 1000 sigma -> fc1 -> silu -> fc2
  torch::nn::ModuleList layers{nullptr};       // UnifiedBlock x num_layers: the shared trunk
  RMSNorm norm{nullptr};                       // final norm, shared by both heads
  torch::nn::Linear lm_head{nullptr};          // D -> V, no bias (untied)
  torch::nn::Linear velocity_head{nullptr};    // D -> p*p*C, with bias

 private:
  UnifiedConfig config_;
};
TORCH_MODULE(UnifiedModel);

// Std of the random init; the Llama default (HF initializer_range).
inline constexpr double kUnifiedInitStd = 0.02;

// Redraws every parameter as the constructor's init_seed does.
void initialize_unified(UnifiedModelImpl& model, uint64_t seed);

}  // namespace tandem::models
