// One micro-batch of the GRPO update: collate (packed or padded), forward through the policy,
// per-token clipped loss (+ KL, - entropy), aggregation with the mini-batch denominators from
// the schedule, backward. Gradients accumulate across micros; the caller reduces and steps.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <vector>

#include "core/batch/collate.h"
#include "core/grpo/loss.h"
#include "parallel/communicator.h"
#include "parallel/gradient_reduction.h"
#include "parallel/vocab_parallel_logprob.h"

namespace tandem {

// The policy as the update sees it: log-probs of the targets (and entropy when asked) on
// the batch's token axis: (N) for packed, (B, T) for padded.
class PolicyModel {
 public:
  virtual ~PolicyModel() = default;
  struct Output {
    torch::Tensor logp;     // (N) or (B, T)
    torch::Tensor entropy;  // same shape, or undefined when not asked
    torch::Tensor loss;     // () the fused forwards only: the token loss, differentiable (logp is then detached)
  };
  virtual Output forward_packed(const PackedBatch& batch, bool with_entropy) = 0;
  virtual Output forward_padded(const PaddedBatch& batch, bool with_entropy) = 0;
  // A model whose lm head can take a token-separable loss inside it (parallel::TokenLossFn; the
  // index is the position on the batch's flat token axis: (N) packed, B*T padded) says so here;
  // the fused forwards are called only then. The gradient is the same; the head skips its
  // backward recompute.
  virtual bool fuses_token_loss() const { return false; }
  virtual Output forward_packed_fused(const PackedBatch& batch, bool with_entropy, const parallel::TokenLossFn& loss);
  virtual Output forward_padded_fused(const PaddedBatch& batch, bool with_entropy, const parallel::TokenLossFn& loss);
  virtual std::vector<torch::Tensor> parameters() = 0;
};

struct UpdateOptions {
  PolicyLossOptions policy;
  LossAggMode loss_agg_mode = LossAggMode::kTokenMean;
  double kl_coef = 0;
  KlEstimator kl_estimator = KlEstimator::kK3;
  double entropy_coef = 0;
  bool packed = true;
  torch::Dtype dtype = torch::kFloat32;
  double loss_weight = 1;       // the track's weight in a unified step (scales the gradient only)
  bool reuse_old_logp = false;  // old_logp = the training forward's own detached log-probs
  bool report_entropy = false;  // compute entropy for metrics even when entropy_coef is 0
  // Truncated importance sampling: the policy loss of each token times the detached weight
  // min(exp(old_logp - rollout_logp), tis_cap) (the sampler's log-probs are the behaviour policy).
  std::optional<double> tis_cap;
  // Fuse the loss into the lm head when the model can and the loss is token-separable (the
  // token ratio; GSPO's sequence ratio needs every token's log-prob first). Same gradient.
  bool fuse_head = true;
  // Packed micros lay a group's prompt out once (collate_packed); the model must take prefix_of.
  bool share_prompts = false;
  // Runs right after the micro's backward (mixed precision: moves the gradient to the master).
  std::function<void()> after_backward;
};

// Sums over micros and ranks (add them, then divide where a mean is wanted).
struct MicroOutcome {
  double loss = 0;         // this micro's share of the mini-batch objective
  PolicyStats stats;       // clip counts and approx-KL sums over action tokens
  double kl_sum = 0;       // sum over action tokens of the KL penalty
  double entropy_sum = 0;  // sum over action tokens of the entropy
  double samples = 0;
  double ratio_max_dev = 0;   // max over action tokens of |ratio - 1| (a max, not a sum)
  double tis_weight_sum = 0;  // sum over action tokens of the TIS weight (tis_cap set)
  double tis_capped = 0;      // action tokens whose weight hit the cap
  double forward_s = 0;       // wall time of collate, forward and loss (timing only)
  double backward_s = 0;      // wall time of the backward
  bool zero_denominator = false;
  MicroOutcome& operator+=(const MicroOutcome& o);
};

// old_logp / ref_logp: per-token tensors on the batch's token axis ((N) packed, (B, T) padded);
// undefined old_logp means the sampler's (rollout) log-probs; undefined ref_logp means no KL.
MicroOutcome train_micro(PolicyModel& model, const std::vector<const ArSample*>& samples,
                         const LossDenominators& denominators, const UpdateOptions& options,
                         const torch::Tensor& old_logp = {}, const torch::Tensor& ref_logp = {});

struct StepOutcome {
  bool applied = false;  // false: a non-finite loss or gradient on some rank; skipped everywhere
  double grad_norm = 0;  // global L2 norm of the reduced gradient, before clipping
};

// Ends a mini-batch: sums gradients over `grad_comm` (dp x cp), agrees on every rank whether the
// loss and gradients are finite, clips by global norm (grad_clip > 0) and steps the optimizer.
// A non-finite step is skipped on every rank (gradients zeroed, parameters untouched). Under tp,
// `tp` says which parameters are sharded, so the norm (and the clip scale) is the whole model's on
// every tp rank.
StepOutcome reduce_and_step(const std::vector<torch::Tensor>& params, torch::optim::Optimizer& optimizer,
                            parallel::Communicator& grad_comm, double grad_clip, bool local_loss_finite,
                            const parallel::TpShards& tp = {});

}  // namespace tandem
