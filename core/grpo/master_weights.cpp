// See master_weights.h. set_data swaps a parameter's storage without changing the tensor's
// identity, so modules, optimizers and autograd that hold the model's tensors keep working.
#include "core/grpo/master_weights.h"

namespace tandem {

MasterWeights::MasterWeights(std::vector<torch::Tensor> model_params) : model_(std::move(model_params)) {
  torch::NoGradGuard no_grad;
  master_.reserve(model_.size());
  for (const torch::Tensor& p : model_) {
    torch::Tensor m = p.detach().to(torch::kFloat32).clone();  // same shape as p
    m.set_requires_grad(true);                                 // a leaf with a .grad, as the optimizer expects
    master_.push_back(m);
  }
}

void MasterWeights::accumulate_grads() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < model_.size(); ++i) {
    torch::Tensor& g = model_[i].mutable_grad();
    if (!g.defined()) continue;
    torch::Tensor& mg = master_[i].mutable_grad();
    if (mg.defined())
      mg.add_(g.to(torch::kFloat32));
    else
      mg = g.to(torch::kFloat32);
    g = torch::Tensor();
  }
}

void MasterWeights::copy_to_model() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < model_.size(); ++i) model_[i].copy_(master_[i]);
}

void MasterWeights::with_master_in_model(const std::function<void()>& fn) {
  std::vector<torch::ScalarType> dtypes;
  for (size_t i = 0; i < model_.size(); ++i) {
    dtypes.push_back(model_[i].scalar_type());
    model_[i].mutable_grad() = torch::Tensor();
    model_[i].set_data(master_[i].detach());
  }
  fn();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < model_.size(); ++i) {
    model_[i].mutable_grad() = torch::Tensor();
    model_[i].set_data(master_[i].detach().to(dtypes[i]));
  }
}

}  // namespace tandem
