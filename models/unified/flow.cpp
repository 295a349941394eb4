// Label -> prompt conditioning for the unified model's velocity head.
#include "models/unified/flow.h"

#include <algorithm>

#include "common/error.h"
#include "models/layers/lora_linear.h"
#include "models/unified/weights.h"

namespace tandem::models {

UnifiedFlow::UnifiedFlow(UnifiedModel model, std::vector<std::vector<int64_t>> prompts)
    : model_(std::move(model)), prompts_(std::move(prompts)) {
  const UnifiedConfig& c = model_->config();
  for (size_t k = 0; k < prompts_.size(); ++k) {
    const auto& p = prompts_[k];
    const std::string who = "image prompt " + std::to_string(k) + ": ";
    if (p.empty()) throw UserError(who + "empty (the empty prompt is the null condition)");
    if (static_cast<int64_t>(p.size()) > c.max_text_len)
      throw UserError(who + std::to_string(p.size()) + " tokens exceed the model's max_text_len " +
                      std::to_string(c.max_text_len));
    for (int64_t id : p)
      if (id < 0 || id >= c.vocab_size)
        throw UserError(who + "token id " + std::to_string(id) + " outside the vocabulary");
    width_ = std::max<int64_t>(width_, static_cast<int64_t>(p.size()));
  }
}

std::pair<torch::Tensor, torch::Tensor> UnifiedFlow::prompt_batch(const torch::Tensor& labels) const {
  const torch::Tensor l = labels.to(torch::kCPU, torch::kInt64).contiguous();  // (B)
  const int64_t b = l.size(0);
  torch::Tensor ids = torch::zeros({b, width_}, torch::kInt64);  // (B, width)
  torch::Tensor lengths = torch::zeros({b}, torch::kInt64);      // (B)
  auto id = ids.accessor<int64_t, 2>();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t k = l[i].item<int64_t>();
    TORCH_CHECK(k >= 0 && k <= null_label(), "UnifiedFlow: label ", k, " outside [0, ", null_label(), "]");
    if (k == null_label()) continue;
    const auto& p = prompts_[static_cast<size_t>(k)];
    for (size_t j = 0; j < p.size(); ++j) id[i][static_cast<int64_t>(j)] = p[j];
    lengths[i] = static_cast<int64_t>(p.size());
  }
  return {ids, lengths};
}

torch::Tensor UnifiedFlow::velocity(const torch::Tensor& x, const torch::Tensor& sigma, const torch::Tensor& labels) {
  const auto [ids, lengths] = prompt_batch(labels);
  return model_->velocity(ids, lengths, x, sigma);  // (B, C, H, W)
}

std::map<std::string, torch::Tensor> UnifiedFlow::named_tensors() {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model_->named_parameters())  // the base: adapters are the text policy's to save
    if (!is_lora_parameter(p.key())) out[p.key()] = p.value().detach();
  return out;
}

void UnifiedFlow::load_tensors(const std::map<std::string, torch::Tensor>& tensors, const std::string& source) {
  load_unified_state(*model_, tensors, source);
}

}  // namespace tandem::models
