// The DiT forward pass: patchify -> + positions -> blocks conditioned on (timestep + class) ->
// final layer -> unpatchify.
#include "models/dit/dit.h"

#include <stdexcept>
#include <string>

namespace tandem::models {

void check_dit_config(const DitConfig& c) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("DitConfig: " + what);
  };
  require(c.image_size >= 1 && c.channels >= 1 && c.patch_size >= 1, "image_size, channels, patch_size must be >= 1");
  require(c.image_size % c.patch_size == 0,
          "patch_size " + std::to_string(c.patch_size) + " does not divide image_size " + std::to_string(c.image_size));
  require(c.hidden_size >= 1 && c.num_layers >= 1 && c.num_heads >= 1 && c.num_classes >= 1,
          "hidden_size, num_layers, num_heads, num_classes must be >= 1");
  require(c.hidden_size % c.num_heads == 0,
          "num_heads " + std::to_string(c.num_heads) + " does not divide hidden_size " + std::to_string(c.hidden_size));
}

DitImpl::DitImpl(const DitConfig& config) : config_(config) {
  check_dit_config(config);
  const int64_t d = config.hidden_size, p = config.patch_size;
  patch_embed =
      register_module("patch_embed", torch::nn::Conv2d(torch::nn::Conv2dOptions(config.channels, d, p).stride(p)));
  // DiT initialises the patch projection like a linear layer (xavier on the flattened kernel).
  torch::nn::init::xavier_uniform_(patch_embed->weight.view({d, -1}));
  torch::nn::init::zeros_(patch_embed->bias);
  t_embed = register_module("t_embed", TimestepEmbedder(d));
  y_embed = register_module("y_embed", torch::nn::Embedding(config.num_classes + 1, d));
  torch::nn::init::normal_(y_embed->weight, 0.0, 0.02);
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_layers; ++i) blocks->push_back(DitBlock(d, config.num_heads));
  final_layer = register_module("final_layer", FinalLayer(d, p, config.channels));
  pos_embed = register_buffer("pos_embed",
                              sincos_positions_2d(config.grid(), config.grid(), d).to(torch::kFloat32).unsqueeze(0));
}

torch::Tensor DitImpl::forward(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& labels) {
  TORCH_CHECK(x.dim() == 4 && x.size(1) == config_.channels && x.size(2) == config_.image_size &&
                  x.size(3) == config_.image_size,
              "Dit: expected x of shape (B, ", config_.channels, ", ", config_.image_size, ", ", config_.image_size,
              "), got ", x.sizes());
  TORCH_CHECK(sigma.dim() == 1 && labels.dim() == 1 && sigma.size(0) == x.size(0) && labels.size(0) == x.size(0),
              "Dit: sigma and labels must be (B) with B = ", x.size(0));
  const torch::Tensor tokens = patch_embed(x.to(dtype())).flatten(2).transpose(1, 2) + pos_embed;  // (B, N, D)
  const torch::Tensor c = t_embed(sigma) + y_embed(labels);                                        // (B, D)
  torch::Tensor h = tokens;
  for (const auto& block : *blocks) h = block->as<DitBlockImpl>()->forward(h, c);  // (B, N, D)
  return unpatchify(final_layer(h, c));                                            // (B, C, H, W)
}

torch::Tensor DitImpl::unpatchify(const torch::Tensor& tokens) const {
  const int64_t b = tokens.size(0), g = config_.grid(), p = config_.patch_size, ch = config_.channels;
  // (B, N, p*p*C) -> (B, gh, gw, p, p, C) -> (B, C, gh, p, gw, p) -> (B, C, H, W)
  return tokens.view({b, g, g, p, p, ch}).permute({0, 5, 1, 3, 2, 4}).reshape({b, ch, g * p, g * p});
}

}  // namespace tandem::models
