// The packed and padded paths differ only in layout; both reduce to flat per-token tensors with
// a sequence index before the loss core, so the loss code is shared.
#include "core/policy_update.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "parallel/gradient_reduction.h"

namespace tandem {

MicroOutcome& MicroOutcome::operator+=(const MicroOutcome& o) {
  loss += o.loss;
  stats.tokens += o.stats.tokens;
  stats.clipped += o.stats.clipped;
  stats.dual_clipped += o.stats.dual_clipped;
  stats.approx_kl_sum += o.stats.approx_kl_sum;
  kl_sum += o.kl_sum;
  entropy_sum += o.entropy_sum;
  samples += o.samples;
  ratio_max_dev = std::max(ratio_max_dev, o.ratio_max_dev);
  tis_weight_sum += o.tis_weight_sum;
  tis_capped += o.tis_capped;
  forward_s += o.forward_s;
  backward_s += o.backward_s;
  zero_denominator = zero_denominator || o.zero_denominator;
  return *this;
}

MicroOutcome train_micro(PolicyModel& model, const std::vector<const ArSample*>& samples,
                         const LossDenominators& denominators, const UpdateOptions& o, const torch::Tensor& old_logp,
                         const torch::Tensor& ref_logp) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool want_entropy = o.entropy_coef != 0 || o.report_entropy;
  torch::Tensor logp, entropy, mask, adv, old, rollout, seq_index;  // all (T) flat
  if (o.packed) {
    const PackedBatch b = collate_packed(samples, denominators, o.dtype);
    const PolicyModel::Output out = model.forward_packed(b, want_entropy);
    logp = out.logp, entropy = out.entropy;
    mask = b.loss_mask, adv = b.advantages, seq_index = b.seq_index;
    old = old_logp.defined() ? old_logp : b.rollout_logp;
    rollout = b.rollout_logp;
  } else {
    const PaddedBatch b = collate_padded(samples, denominators, o.dtype);
    const PolicyModel::Output out = model.forward_padded(b, want_entropy);
    const int64_t rows = b.input_ids.size(0), width = b.input_ids.size(1);
    logp = out.logp.reshape({-1});
    if (out.entropy.defined()) entropy = out.entropy.reshape({-1});
    mask = b.loss_mask.reshape({-1});
    adv = b.advantages.reshape({-1});
    old = (old_logp.defined() ? old_logp : b.rollout_logp).reshape({-1});
    rollout = b.rollout_logp.reshape({-1});
    seq_index = torch::arange(rows, torch::kInt64).unsqueeze(1).expand({rows, width}).reshape({-1});
  }
  // Host-collated fields follow the model's outputs to their device (a no-op on CPU).
  mask = mask.to(logp.device()), adv = adv.to(logp.device()), old = old.to(logp.device());
  seq_index = seq_index.to(logp.device());
  if (o.reuse_old_logp) old = logp.detach();
  const PolicyLoss pl = policy_loss(logp, old, adv, mask, seq_index, o.policy);
  torch::Tensor per_token = pl.loss;  // (T)
  MicroOutcome out;
  const torch::Tensor m = mask != 0;
  if (o.tis_cap) {
    // Detached: the weight corrects the sampling distribution, it is not trained through.
    const torch::Tensor raw = torch::exp(old.detach() - rollout.to(logp.device()).to(old.scalar_type()));  // (T)
    const torch::Tensor w = torch::where(m, raw.clamp_max(*o.tis_cap), torch::ones_like(raw));  // (T)
    per_token = per_token * w.to(per_token.scalar_type());
    out.tis_weight_sum = w.masked_select(m).sum().item<double>();
    out.tis_capped = (m & (raw > *o.tis_cap)).sum().item<double>();
  }
  if (ref_logp.defined() && o.kl_coef != 0) {
    const torch::Tensor kl = kl_penalty(logp, ref_logp.reshape({-1}).to(logp.device()), o.kl_estimator);
    per_token = per_token + o.kl_coef * kl;
    out.kl_sum = torch::where(m, kl.detach(), torch::zeros_like(kl)).sum().item<double>();
  }
  if (o.entropy_coef != 0 && entropy.defined()) {
    per_token = per_token - o.entropy_coef * entropy;
    out.entropy_sum = torch::where(m, entropy.detach(), torch::zeros_like(entropy)).sum().item<double>();
  }
  const AggregatedLoss agg = aggregate_loss(per_token, mask, seq_index, o.loss_agg_mode, denominators);
  const auto t1 = std::chrono::steady_clock::now();
  if (agg.loss.requires_grad()) (o.loss_weight == 1 ? agg.loss : agg.loss * o.loss_weight).backward();
  const auto t2 = std::chrono::steady_clock::now();
  out.loss = agg.loss.item<double>();
  out.zero_denominator = agg.zero_denominator;
  out.stats = policy_stats(pl, logp, old, mask);
  if (o.report_entropy && o.entropy_coef == 0 && entropy.defined())
    out.entropy_sum = torch::where(m, entropy.detach(), torch::zeros_like(entropy)).sum().item<double>();
  if (m.any().item<bool>())
    out.ratio_max_dev = (pl.ratio.detach() - 1).abs().masked_select(m).max().item<double>();
  out.samples = static_cast<double>(samples.size());
  out.forward_s = std::chrono::duration<double>(t1 - t0).count();
  out.backward_s = std::chrono::duration<double>(t2 - t1).count();
  return out;
}

StepOutcome reduce_and_step(const std::vector<torch::Tensor>& params, torch::optim::Optimizer& optimizer,
                            parallel::Communicator& grad_comm, double grad_clip, bool local_loss_finite) {
  parallel::all_reduce_gradients(params, grad_comm);
  const bool finite = parallel::all_ranks_finite(local_loss_finite && parallel::gradients_finite(params), grad_comm);
  StepOutcome out;
  if (!finite) {
    optimizer.zero_grad();
    return out;
  }
  double sq = 0;
  for (const auto& p : params) sq += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  out.grad_norm = std::sqrt(sq);
  if (grad_clip > 0 && out.grad_norm > grad_clip) {
    torch::NoGradGuard no_grad;
    const double scale = grad_clip / (out.grad_norm + 1e-6);
    for (const auto& p : params) p.grad().mul_(scale);
  }
  optimizer.step();
  optimizer.zero_grad();
  out.applied = true;
  return out;
}

}  // namespace tandem
