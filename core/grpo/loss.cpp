// Implements DESIGN section 3 literally; the fixtures in tests/fixtures come from an
// independent PyTorch reference (scripts/fixtures/make_numerics.py).
#include "core/grpo/loss.h"

namespace tandem {

namespace {

torch::Tensor as_bool(const torch::Tensor& mask) { return mask.scalar_type() == torch::kBool ? mask : mask != 0; }

int64_t num_segments(const torch::Tensor& seq_index) {
  return seq_index.numel() == 0 ? 0 : seq_index.max().item<int64_t>() + 1;
}

// Per-sequence sums of `values` over masked-in tokens, gathered back per token: (T) -> (T).
torch::Tensor segment_sum_per_token(const torch::Tensor& values, const torch::Tensor& seq_index, int64_t b) {
  torch::Tensor sums = torch::zeros({b}, values.options()).index_add(0, seq_index, values);  // (B)
  return sums.index_select(0, seq_index);
}

}  // namespace

PolicyLoss policy_loss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& adv,
                       const torch::Tensor& mask, const torch::Tensor& seq_index, const PolicyLossOptions& o) {
  TORCH_CHECK(logp.sizes() == old_logp.sizes() && logp.sizes() == adv.sizes() && logp.sizes() == mask.sizes(),
              "policy_loss: logp, old_logp, adv and mask must have the same shape");
  const torch::Tensor m = as_bool(mask);
  torch::Tensor log_ratio;  // (T)
  if (o.ratio == RatioKind::kToken) {
    log_ratio = logp - old_logp;
  } else {
    const int64_t b = num_segments(seq_index);
    const torch::Tensor mf = m.to(logp.scalar_type());
    const torch::Tensor diff = torch::where(m, (logp - old_logp).detach(), torch::zeros_like(logp));
    const torch::Tensor seq_sum = segment_sum_per_token(diff, seq_index, b);  // (T)
    const torch::Tensor seq_cnt = segment_sum_per_token(mf, seq_index, b);    // (T)
    const torch::Tensor seq_lr = torch::where(seq_cnt > 0, seq_sum / seq_cnt.clamp_min(1), torch::zeros_like(seq_sum));
    log_ratio = seq_lr + (logp - logp.detach());
  }
  PolicyLoss out;
  out.ratio = torch::exp(log_ratio.clamp(-kLogRatioClamp, kLogRatioClamp));
  const torch::Tensor l1 = -adv * out.ratio;
  const torch::Tensor l2 = -adv * out.ratio.clamp(1.0 - o.clip_low, 1.0 + o.clip_high);
  torch::Tensor l = torch::max(l1, l2);
  out.clipped = (l2 > l1).logical_and(m);
  if (o.clip_c) {
    const torch::Tensor bound = -adv * *o.clip_c;
    const torch::Tensor negative = adv < 0;
    out.dual_clipped = negative.logical_and(l > bound).logical_and(m);
    l = torch::where(negative, torch::min(l, bound), l);
  } else {
    out.dual_clipped = torch::zeros_like(m);
  }
  out.loss = l;
  return out;
}

torch::Tensor policy_stats_tensor(const PolicyLoss& loss, const torch::Tensor& logp, const torch::Tensor& old_logp,
                                  const torch::Tensor& mask) {
  const torch::Tensor m = as_bool(mask);
  const torch::Tensor d = (old_logp - logp).detach().to(torch::kFloat64);
  return torch::stack({m.sum().to(torch::kFloat64), loss.clipped.sum().to(torch::kFloat64),
                       loss.dual_clipped.sum().to(torch::kFloat64), torch::where(m, d, torch::zeros_like(d)).sum()});
}

PolicyStats policy_stats_from(const double* four) {
  PolicyStats s;
  s.tokens = four[0], s.clipped = four[1], s.dual_clipped = four[2], s.approx_kl_sum = four[3];
  return s;
}

PolicyStats policy_stats(const PolicyLoss& loss, const torch::Tensor& logp, const torch::Tensor& old_logp,
                         const torch::Tensor& mask) {
  const torch::Tensor host = policy_stats_tensor(loss, logp, old_logp, mask).to(torch::kCPU).contiguous();  // (4)
  return policy_stats_from(host.data_ptr<double>());
}

torch::Tensor kl_penalty(const torch::Tensor& logp, const torch::Tensor& ref_logp, KlEstimator estimator) {
  switch (estimator) {
    case KlEstimator::kK1:
      return logp - ref_logp;
    case KlEstimator::kK2: {
      const torch::Tensor d = logp - ref_logp;
      return 0.5 * d * d;
    }
    case KlEstimator::kK3: {
      const torch::Tensor d = (ref_logp - logp).clamp(-kLogRatioClamp, kLogRatioClamp);
      return (torch::exp(d) - d - 1).clamp(-10.0, 10.0);
    }
  }
  TORCH_CHECK(false, "kl_penalty: unknown estimator");
}

torch::Tensor entropy_from_logits(const torch::Tensor& logits) {
  const torch::Tensor lse = torch::logsumexp(logits, -1, /*keepdim=*/true);  // (T, 1)
  const torch::Tensor p = torch::exp(logits - lse);                          // (T, V)
  return lse.squeeze(-1) - (p * logits).sum(-1);                             // (T)
}

AggregatedLoss aggregate_loss(const torch::Tensor& loss, const torch::Tensor& mask, const torch::Tensor& seq_index,
                              LossAggMode mode, const LossDenominators& d, const torch::Tensor& seq_action_tokens) {
  const torch::Tensor m = as_bool(mask);
  torch::Tensor per_token = loss;  // (T)
  double denominator = 0;
  switch (mode) {
    case LossAggMode::kTokenMean:
      denominator = d.n_tok;
      break;
    case LossAggMode::kSeqMeanTokenMean: {
      torch::Tensor len;  // (T) the action-token count of each token's sequence
      if (seq_action_tokens.defined()) {
        len = seq_action_tokens.to(loss.scalar_type()).index_select(0, seq_index);
      } else {
        len = segment_sum_per_token(m.to(loss.scalar_type()), seq_index, num_segments(seq_index));
      }
      per_token = loss / len.clamp_min(1);
      denominator = d.n_seq;
      break;
    }
    case LossAggMode::kSeqMeanTokenSum:
      denominator = d.n_seq;
      break;
    case LossAggMode::kSeqMeanTokenSumNorm:
      denominator = d.n_seq * d.l_norm;
      break;
  }
  AggregatedLoss out;
  if (denominator <= 0) {
    // No action token in the whole mini-batch: a zero loss that still has a graph (zero grads).
    out.zero_denominator = true;
    out.loss = torch::where(torch::zeros_like(m), per_token, torch::zeros_like(per_token)).sum();
    return out;
  }
  out.loss = torch::where(m, per_token, torch::zeros_like(per_token)).sum() / denominator;
  return out;
}

}  // namespace tandem
