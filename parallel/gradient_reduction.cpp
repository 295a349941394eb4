// Bucketed gradient all-reduce: gradients of one dtype are copied into a flat buffer up to
// bucket_bytes, reduced in one call, and copied back.
#include "parallel/gradient_reduction.h"

#include <cmath>

namespace tandem::parallel {

void all_reduce_gradients(const std::vector<torch::Tensor>& params, Communicator& comm, int64_t bucket_bytes) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  if (comm.size() == 1) return;
  size_t i = 0;
  while (i < grads.size()) {
    // One bucket: consecutive gradients of the same dtype and device up to bucket_bytes.
    const auto dtype = grads[i].scalar_type();
    const auto device = grads[i].device();
    size_t j = i;
    int64_t bytes = 0, numel = 0;
    while (j < grads.size() && grads[j].scalar_type() == dtype && grads[j].device() == device &&
           (j == i || bytes + grads[j].numel() * grads[j].element_size() <= bucket_bytes)) {
      bytes += grads[j].numel() * grads[j].element_size();
      numel += grads[j].numel();
      ++j;
    }
    torch::Tensor flat = torch::empty({numel}, grads[i].options());  // (numel)
    int64_t off = 0;
    for (size_t k = i; k < j; ++k) {
      flat.slice(0, off, off + grads[k].numel()).copy_(grads[k].reshape({-1}));
      off += grads[k].numel();
    }
    comm.all_reduce(flat, ReduceOp::kSum);
    off = 0;
    for (size_t k = i; k < j; ++k) {
      grads[k].copy_(flat.slice(0, off, off + grads[k].numel()).view_as(grads[k]));
      off += grads[k].numel();
    }
    i = j;
  }
}

torch::Tensor gradients_sq_norm(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;  // () float64 each, on its gradient's device
  torch::Device device = torch::kCPU;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    device = p.grad().device();
    norms.push_back(torch::linalg_vector_norm(p.grad(), 2, c10::nullopt, false, torch::kFloat64));
  }
  if (norms.empty()) return torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device));
  return torch::stack(norms).pow(2).sum();  // ()
}

GradientCheck check_gradients(const std::vector<torch::Tensor>& params, bool local_loss_finite, Communicator& comm,
                              const TpShards& tp) {
  torch::NoGradGuard no_grad;
  torch::Tensor sq;  // ()
  if (tp.active()) {
    TORCH_CHECK(tp.sharded.size() == params.size(), "check_gradients: ", tp.sharded.size(), " tp flags for ",
                params.size(), " parameters");
    std::vector<torch::Tensor> sharded, replicated;
    for (size_t i = 0; i < params.size(); ++i) (tp.sharded[i] ? sharded : replicated).push_back(params[i]);
    torch::Tensor part = gradients_sq_norm(sharded).to(tp.tp->device()).reshape({1});  // (1)
    tp.tp->all_reduce(part);
    sq = (part.reshape({}) + gradients_sq_norm(replicated).to(part.device())).to(comm.device());
  } else {
    sq = gradients_sq_norm(params).to(comm.device());
  }
  torch::Tensor flag =  // (1): 1 where this rank is not finite
      torch::logical_or(torch::logical_not(torch::isfinite(sq)), torch::tensor(!local_loss_finite).to(sq.device()))
          .to(torch::kFloat64)
          .reshape({1});
  comm.all_reduce(flag, ReduceOp::kMax);                                           // then 1 where any rank is not
  const torch::Tensor host = torch::cat({flag, sq.reshape({1})}).to(torch::kCPU);  // (2): the step's one sync
  const double* h = host.data_ptr<double>();
  return {h[0] == 0.0, std::sqrt(h[1])};
}

}  // namespace tandem::parallel
