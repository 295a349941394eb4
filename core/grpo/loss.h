// GRPO policy loss (PPO clip, asymmetric range, dual clip; GSPO sequence ratio), KL estimators,
// entropy, and the loss aggregation modes (DESIGN section 3). A micro's aggregated loss is its
// exact share of the mini-batch objective because the denominators come from the schedule.
#pragma once

#include <torch/torch.h>

#include <optional>

#include "core/batch/denominators.h"
#include "core/config/enums.h"

namespace tandem {

// Log-ratios are clamped to this before exp(), so a stale or broken old log-prob cannot overflow.
constexpr double kLogRatioClamp = 20.0;

struct PolicyLossOptions {
  double clip_low = 0.2;
  double clip_high = 0.2;
  std::optional<double> clip_c = 3.0;  // dual clip for A < 0; null: off
  RatioKind ratio = RatioKind::kToken;
};

struct PolicyLoss {
  torch::Tensor loss;          // (T) per-token loss l, computed at every position
  torch::Tensor ratio;         // (T) importance ratio used
  torch::Tensor clipped;       // (T) bool: the clipped branch is active (l2 > l1)
  torch::Tensor dual_clipped;  // (T) bool: the dual clip binds (A < 0 and max(l1,l2) > -A*c)
};

// logp, old_logp, adv: (T) per-token, any float dtype; mask (T) bool or 0/1; seq_index (T) int64
// in [0, B). With RatioKind::kSequence the ratio of sequence s is exp(mean over its action tokens
// of logp - old_logp), with the gradient reaching each token through its own logp (GSPO-token).
PolicyLoss policy_loss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& adv,
                       const torch::Tensor& mask, const torch::Tensor& seq_index, const PolicyLossOptions& options);

// Sums over action tokens, so micros and ranks add them before dividing.
struct PolicyStats {
  double tokens = 0;
  double clipped = 0;
  double dual_clipped = 0;
  double approx_kl_sum = 0;  // sum of (old_logp - logp)
  double clipfrac() const { return tokens > 0 ? clipped / tokens : 0.0; }
  double dual_clipfrac() const { return tokens > 0 ? dual_clipped / tokens : 0.0; }
  double approx_kl() const { return tokens > 0 ? approx_kl_sum / tokens : 0.0; }
};
PolicyStats policy_stats(const PolicyLoss& loss, const torch::Tensor& logp, const torch::Tensor& old_logp,
                         const torch::Tensor& mask);
// The same four figures (tokens, clipped, dual_clipped, approx_kl_sum) as one (4) float64 tensor on
// the tensors' device, for a caller that copies them to the host with its own (one sync a micro).
torch::Tensor policy_stats_tensor(const PolicyLoss& loss, const torch::Tensor& logp, const torch::Tensor& old_logp,
                                  const torch::Tensor& mask);
PolicyStats policy_stats_from(const double* four);

// Per-token KL to the reference: k1 logp-ref; k2 0.5(logp-ref)^2; k3 exp(d)-d-1, d=clamp(ref-logp).
torch::Tensor kl_penalty(const torch::Tensor& logp, const torch::Tensor& ref_logp, KlEstimator estimator);  // (T)

// logits (T, V) -> entropy (T), computed in the logits' dtype.
torch::Tensor entropy_from_logits(const torch::Tensor& logits);

struct AggregatedLoss {
  torch::Tensor loss;             // () this micro's share of the mini-batch objective
  bool zero_denominator = false;  // the mode's denominator was 0: loss is 0 (no NaN), flagged
};

// loss (T); mask (T); seq_index (T) int64. seq_action_tokens (B), optional: each sequence's
// action-token count over its whole length, for a sequence split across ranks (CP); by default
// it is counted from this micro's mask.
AggregatedLoss aggregate_loss(const torch::Tensor& loss, const torch::Tensor& mask, const torch::Tensor& seq_index,
                              LossAggMode mode, const LossDenominators& denominators,
                              const torch::Tensor& seq_action_tokens = {});

}  // namespace tandem
