// Bucketed gradient all-reduce: gradients of one dtype are copied into a flat buffer up to
// bucket_bytes, reduced in one call, and copied back.
#include "parallel/gradient_reduction.h"

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

bool all_ranks_finite(bool local_finite, Communicator& comm) {
  torch::Tensor bad = torch::tensor({local_finite ? 0.0 : 1.0}, torch::kFloat64);
  comm.all_reduce(bad, ReduceOp::kMax);
  return bad.item<double>() == 0.0;
}

bool gradients_finite(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params)
    if (p.grad().defined() && !torch::isfinite(p.grad()).all().item<bool>()) return false;
  return true;
}

}  // namespace tandem::parallel
