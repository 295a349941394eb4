// The packed and padded paths differ only in layout; both reduce to flat per-token tensors with
// a sequence index before the loss core, so the loss code is shared.
#include "core/grpo/policy_update.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>

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

namespace {

// The loss's per-token inputs on the micro's flat token axis, on the model's device.
struct TokenInputs {
  torch::Tensor mask, adv, seq_index;                     // (T)
  torch::Tensor old;                                      // (T), or undefined: the forward's own log-probs (reuse)
  torch::Tensor rollout;                                  // (T) the sampler's log-probs
  torch::Tensor ref;                                      // (T), or undefined: no KL
  TokenInputs select(const torch::Tensor& index) const {  // the rows at index (C)
    const auto pick = [&](const torch::Tensor& t) { return t.defined() ? t.index_select(0, index) : t; };
    return {pick(mask), pick(adv), pick(seq_index), pick(old), pick(rollout), pick(ref)};
  }
};

struct TokenTerms {
  PolicyLoss pl;
  torch::Tensor old;        // (T) the old log-probs used
  torch::Tensor per_token;  // (T) the objective's per-token term
  torch::Tensor kl;         // (T), or undefined
  torch::Tensor tis_raw;    // (T) exp(old - rollout), or undefined
  torch::Tensor tis_w;      // (T) its capped weight, or undefined
};

// policy loss (x the TIS weight) + kl_coef KL - entropy_coef H, token by token. The fused head
// calls this on each chunk's rows and the micro on all of them, so both see the same terms.
TokenTerms token_terms(const torch::Tensor& logp, const torch::Tensor& entropy, const TokenInputs& in,
                       const UpdateOptions& o) {
  TokenTerms t;
  t.old = in.old.defined() ? in.old : logp.detach();
  t.pl = policy_loss(logp, t.old, in.adv, in.mask, in.seq_index, o.policy);
  t.per_token = t.pl.loss;
  if (o.tis_cap) {
    // Detached: the weight corrects the sampling distribution, it is not trained through.
    const torch::Tensor m = in.mask != 0;
    t.tis_raw = torch::exp(t.old.detach() - in.rollout.to(t.old.scalar_type()));
    t.tis_w = torch::where(m, t.tis_raw.clamp_max(*o.tis_cap), torch::ones_like(t.tis_raw));
    t.per_token = t.per_token * t.tis_w.to(t.per_token.scalar_type());
  }
  if (in.ref.defined() && o.kl_coef != 0) {
    t.kl = kl_penalty(logp, in.ref, o.kl_estimator);
    t.per_token = t.per_token + o.kl_coef * t.kl;
  }
  if (o.entropy_coef != 0 && entropy.defined()) t.per_token = t.per_token - o.entropy_coef * entropy;
  return t;
}

// d aggregate / d per_token: every mode is linear in the per-token terms with weights fixed by
// the mask and the schedule's denominators, so autograd through aggregate_loss gives them.
torch::Tensor token_weights(const torch::Tensor& mask, const torch::Tensor& seq_index, const UpdateOptions& o,
                            const LossDenominators& denominators, torch::ScalarType dtype) {
  torch::AutoGradMode grad_on(true);
  const torch::Tensor ones = torch::ones(mask.sizes(), mask.options().dtype(dtype)).requires_grad_(true);  // (T)
  const torch::Tensor loss = aggregate_loss(ones, mask, seq_index, o.loss_agg_mode, denominators).loss;
  return torch::autograd::grad({loss}, {ones})[0];  // (T)
}

}  // namespace

PolicyModel::Output PolicyModel::forward_packed_fused(const PackedBatch&, bool, const parallel::TokenLossFn&) {
  throw std::logic_error("forward_packed_fused called on a model that does not fuse its loss");
}

PolicyModel::Output PolicyModel::forward_padded_fused(const PaddedBatch&, bool, const parallel::TokenLossFn&) {
  throw std::logic_error("forward_padded_fused called on a model that does not fuse its loss");
}

MicroOutcome train_micro(PolicyModel& model, const std::vector<const ArSample*>& samples,
                         const LossDenominators& denominators, const UpdateOptions& o, const torch::Tensor& old_logp,
                         const torch::Tensor& ref_logp) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool want_entropy = o.entropy_coef != 0 || o.report_entropy;
  const bool fused =
      o.fuse_head && o.policy.ratio == RatioKind::kToken && torch::GradMode::is_enabled() && model.fuses_token_loss();
  const torch::Device device = model.parameters().front().device();
  // Host-collated fields go to the model's device (a no-op on CPU), flat on the token axis.
  const auto flat = [&](const torch::Tensor& t) { return t.reshape({-1}).to(device); };
  std::optional<PackedBatch> packed;
  std::optional<PaddedBatch> padded;
  TokenInputs in;
  if (o.packed) {
    packed = collate_packed(samples, denominators, o.dtype, o.share_prompts);
    in.mask = flat(packed->loss_mask), in.adv = flat(packed->advantages), in.seq_index = flat(packed->seq_index);
    in.rollout = flat(packed->rollout_logp);
  } else {
    padded = collate_padded(samples, denominators, o.dtype);
    const int64_t rows = padded->input_ids.size(0), width = padded->input_ids.size(1);
    in.mask = flat(padded->loss_mask), in.adv = flat(padded->advantages), in.rollout = flat(padded->rollout_logp);
    in.seq_index = flat(torch::arange(rows, torch::kInt64).unsqueeze(1).expand({rows, width}));
  }
  if (!o.reuse_old_logp) in.old = old_logp.defined() ? flat(old_logp) : in.rollout;
  if (ref_logp.defined() && o.kl_coef != 0) in.ref = flat(ref_logp);

  PolicyModel::Output out_model;
  if (fused) {
    torch::Tensor weights;  // (T) d aggregate / d per_token, made at the first chunk (its dtype)
    const parallel::TokenLossFn token_loss = [&](const torch::Tensor& index, const torch::Tensor& logp_c,
                                                 const torch::Tensor& entropy_c) {
      torch::AutoGradMode grad_on(true);                              // the head's forward runs without grad
      const torch::Tensor idx = index.to(device);                     // (C)
      const torch::Tensor lp = logp_c.detach().requires_grad_(true);  // (C)
      const torch::Tensor en = o.entropy_coef != 0 && entropy_c.defined() ? entropy_c.detach().requires_grad_(true)
                                                                          : torch::Tensor();  // (C)
      const TokenTerms t = token_terms(lp, en, in.select(idx), o);
      if (!weights.defined())
        weights = token_weights(in.mask, in.seq_index, o, denominators, t.per_token.scalar_type());
      const torch::Tensor loss = (t.per_token * weights.index_select(0, idx)).sum();  // ()
      std::vector<torch::Tensor> wrt = {lp};
      if (en.defined()) wrt.push_back(en);
      const auto g = torch::autograd::grad({loss}, wrt, {}, false, false, /*allow_unused=*/true);
      return parallel::TokenLossChunk{loss.detach(), g[0], en.defined() ? g[1] : torch::Tensor()};
    };
    out_model = o.packed ? model.forward_packed_fused(*packed, want_entropy, token_loss)
                         : model.forward_padded_fused(*padded, want_entropy, token_loss);
  } else {
    out_model = o.packed ? model.forward_packed(*packed, want_entropy) : model.forward_padded(*padded, want_entropy);
  }
  const torch::Tensor logp = out_model.logp.reshape({-1});                                                        // (T)
  const torch::Tensor entropy = out_model.entropy.defined() ? out_model.entropy.reshape({-1}) : torch::Tensor();  // (T)

  // The fused head already holds the gradient; the terms here give the loss value and stats.
  const TokenTerms t = token_terms(logp, entropy, in, o);
  MicroOutcome out;
  const torch::Tensor m = in.mask != 0;
  // The micro's figures as device scalars, copied to the host together after the backward.
  const torch::Tensor zero = torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device));
  const auto masked_sum = [&](const torch::Tensor& x) {
    return torch::where(m, x.detach(), torch::zeros_like(x)).sum().to(torch::kFloat64);
  };
  const bool want_tis = o.tis_cap.has_value();
  std::vector<torch::Tensor> figures = {
      want_tis ? t.tis_w.masked_select(m).sum().to(torch::kFloat64) : zero,
      want_tis ? (m & (t.tis_raw > *o.tis_cap)).sum().to(torch::kFloat64) : zero,
      t.kl.defined() ? masked_sum(t.kl) : zero,
      entropy.defined() && (o.entropy_coef != 0 || o.report_entropy) ? masked_sum(entropy) : zero,
      // |ratio - 1| >= 0, so tokens masked out as 0 never raise the max (0 when none is in).
      t.pl.ratio.numel() == 0
          ? zero
          : torch::where(m, (t.pl.ratio.detach() - 1).abs(), torch::zeros_like(t.pl.ratio)).max().to(torch::kFloat64)};
  const AggregatedLoss agg = aggregate_loss(t.per_token, in.mask, in.seq_index, o.loss_agg_mode, denominators);
  const torch::Tensor& objective = fused ? out_model.loss : agg.loss;  // ()
  const auto t1 = std::chrono::steady_clock::now();
  if (objective.requires_grad()) (o.loss_weight == 1 ? objective : objective * o.loss_weight).backward();
  if (o.after_backward) o.after_backward();
  const auto t2 = std::chrono::steady_clock::now();
  figures.push_back(agg.loss.detach().to(torch::kFloat64));
  figures.push_back(policy_stats_tensor(t.pl, logp, t.old, in.mask));
  const torch::Tensor host = torch::cat({torch::stack(torch::TensorList(figures.data(), 6)), figures[6]})
                                 .to(torch::kCPU)
                                 .contiguous();  // (10): the micro's one copy to the host
  const double* h = host.data_ptr<double>();
  out.tis_weight_sum = h[0], out.tis_capped = h[1], out.kl_sum = h[2], out.entropy_sum = h[3];
  out.ratio_max_dev = h[4], out.loss = h[5];
  out.zero_denominator = agg.zero_denominator;
  out.stats = policy_stats_from(h + 6);
  out.samples = static_cast<double>(samples.size());
  out.forward_s = std::chrono::duration<double>(t1 - t0).count();
  out.backward_s = std::chrono::duration<double>(t2 - t1).count();
  return out;
}

StepOutcome reduce_and_step(const std::vector<torch::Tensor>& params, torch::optim::Optimizer& optimizer,
                            parallel::Communicator& grad_comm, double grad_clip, bool local_loss_finite,
                            const parallel::TpShards& tp) {
  parallel::all_reduce_gradients(params, grad_comm);
  const parallel::GradientCheck check = parallel::check_gradients(params, local_loss_finite, grad_comm, tp);
  StepOutcome out;
  if (!check.finite) {
    optimizer.zero_grad();
    return out;
  }
  out.grad_norm = check.norm;
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
