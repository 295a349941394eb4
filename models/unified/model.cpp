// The unified forward: embed [text, patches] -> shared trunk under the unified mask -> LM head on
// the text slots, velocity head on the patch slots.
#include "models/unified/model.h"

#include <ATen/CPUGeneratorImpl.h>

#include <stdexcept>
#include <string>

#include "models/unified/sequence.h"

namespace tandem::models {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("unified model: " + what);
}

void check_input(const UnifiedInput& in, const UnifiedConfig& c) {
  require(in.text_ids.defined() && in.text_ids.dim() == 2, "text_ids must be (B, T_text)");
  require(!at::isFloatingType(in.text_ids.scalar_type()), "text_ids must be integer token ids");
  const int64_t b = in.text_ids.size(0), width = in.text_ids.size(1);
  require(in.text_lengths.defined() && in.text_lengths.dim() == 1 && in.text_lengths.size(0) == b,
          "text_lengths must be (B) with B = " + std::to_string(b));
  require(width <= c.max_text_len,
          "text width " + std::to_string(width) + " exceeds max_text_len " + std::to_string(c.max_text_len));
  if (in.text_ids.numel() > 0)
    require(in.text_ids.min().item<int64_t>() >= 0 && in.text_ids.max().item<int64_t>() < c.vocab_size,
            "token ids (padding included) must lie in [0, vocab_size = " + std::to_string(c.vocab_size) + ")");
  require(in.x_t.defined() == in.sigma.defined(), "x_t and sigma come together");
  if (!in.has_image()) {
    require(width > 0, "a text-only input needs T_text >= 1");
    return;
  }
  const std::vector<int64_t> shape{b, c.channels, c.image_size, c.image_size};
  require(in.x_t.sizes() == shape,
          "x_t must be (B, C, H, W) = " + c10::str(c10::IntArrayRef(shape)) + ", got " + c10::str(in.x_t.sizes()));
  require(in.sigma.dim() == 1 && in.sigma.size(0) == b, "sigma must be (B) with B = " + std::to_string(b));
}

}  // namespace

UnifiedModelImpl::UnifiedModelImpl(const UnifiedConfig& config, std::optional<uint64_t> init_seed) : config_(config) {
  config_.validate();
  const int64_t d = config_.hidden_size;
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(config_.vocab_size, d));
  patch_embed = register_module("patch_embed", torch::nn::Linear(config_.patch_dim(), d));
  pos_embed = register_parameter("pos_embed", torch::zeros({config_.num_patches(), d}));
  t_embed = register_module("t_embed", TimestepEmbedder(d));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config_.num_layers; ++i) layers->push_back(UnifiedBlock(config_));
  norm = register_module("norm", RMSNorm(d, config_.rms_eps));
  lm_head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(d, config_.vocab_size).bias(false)));
  velocity_head = register_module("velocity_head", torch::nn::Linear(d, config_.patch_dim()));
  if (init_seed) initialize_unified(*this, *init_seed);
}

torch::Tensor UnifiedModelImpl::embed(const UnifiedInput& in) {
  check_input(in, config_);
  const torch::Tensor text = embed_tokens(in.text_ids.to(device(), torch::kInt64));  // (B, T_text, D)
  if (!in.has_image()) return text;
  const torch::Tensor patches = patchify(in.x_t.to(device(), dtype()), config_.patch_size);  // (B, N, p*p*C)
  // sigma in at least float32: the sinusoid of 1000 sigma needs it (see dit_layers.h).
  const torch::Tensor temb = t_embed(in.sigma.to(device(), compute_dtype(dtype())));  // (B, D)
  const torch::Tensor image = patch_embed(patches) + pos_embed + temb.unsqueeze(1);   // (B, N, D)
  return torch::cat({text, image}, 1);                                                // (B, T, D)
}

torch::Tensor UnifiedModelImpl::trunk(const torch::Tensor& h, const torch::Tensor& positions,
                                      const torch::Tensor& allowed) {
  require(h.dim() == 3 && positions.sizes() == h.sizes().slice(0, 2) &&
              allowed.sizes() == c10::IntArrayRef({h.size(0), 1, h.size(1), h.size(1)}),
          "trunk needs h (B, T, D), positions (B, T), allowed (B, 1, T, T)");
  const RotaryTables rotary =  // (B*T, 1, head_dim), rows in (b, t) order
      rotary_tables(positions.reshape({-1}).to(device()), config_.head_dim(), config_.rope_theta, h.scalar_type());
  const torch::Tensor mask = allowed.to(device(), torch::kBool);  // (B, 1, T, T)
  torch::Tensor x = h;                                            // (B, T, D)
  for (const auto& layer : *layers) x = layer->as<UnifiedBlockImpl>()->forward(x, rotary, mask);
  return norm(x);  // (B, T, D)
}

UnifiedOutput UnifiedModelImpl::heads(const torch::Tensor& hidden, int64_t text_width, bool image) {
  UnifiedOutput out;
  out.text_logits = lm_head(hidden.narrow(1, 0, text_width)).to(compute_dtype(dtype()));  // (B, T_text, V)
  if (image) {
    const torch::Tensor image = hidden.narrow(1, text_width, hidden.size(1) - text_width);  // (B, N, D)
    out.velocity = unpatchify(velocity_head(image), config_.patch_size, config_.channels);  // (B, C, H, W)
  }
  return out;
}

UnifiedOutput UnifiedModelImpl::forward(const UnifiedInput& in) {
  const torch::Tensor h = embed(in);  // (B, T, D); checks the input
  const int64_t width = in.text_ids.size(1), patches = in.has_image() ? config_.num_patches() : 0;
  const torch::Tensor lengths = in.text_lengths.to(device(), torch::kInt64);  // (B)
  const torch::Tensor hidden =
      trunk(h, unified_positions(lengths, width, patches), unified_attention_mask(lengths, width, patches));
  return heads(hidden, width, in.has_image());
}

torch::Tensor UnifiedModelImpl::text_logits(const torch::Tensor& input_ids, const torch::Tensor& lengths) {
  return forward({input_ids, lengths, {}, {}}).text_logits;  // (B, T, V)
}

torch::Tensor UnifiedModelImpl::velocity(const torch::Tensor& prompt_ids, const torch::Tensor& prompt_lengths,
                                         const torch::Tensor& x_t, const torch::Tensor& sigma) {
  return forward({prompt_ids, prompt_lengths, x_t, sigma}).velocity;  // (B, C, H, W)
}

void initialize_unified(UnifiedModelImpl& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  for (auto& item : model.named_parameters()) {
    torch::Tensor& p = item.value();
    if (ends_with(item.key(), "norm.weight")) {
      p.fill_(1.0);
    } else if (ends_with(item.key(), ".bias")) {
      p.zero_();
    } else {
      p.copy_(torch::randn(p.sizes(), gen, torch::kFloat64) * kUnifiedInitStd);
    }
  }
}

}  // namespace tandem::models
