// The AR track's supervised warm-start: cross-entropy on the reference answer (+ EOS) of the
// task's prompts, a separate prompt stream (seed + 1) so RL sees the same prompts with or
// without it; with tracks.ar.env, on the model turns of demonstrated conversations (warmstart.demos)
// laid out as episodes. Departure from pure RL post-training, recipe-visible: tracks.ar.warmstart.
#include <spdlog/spdlog.h>

#include <optional>

#include "core/env/demonstrations.h"
#include "core/grpo/adamw_rate.h"
#include "core/grpo/lr_schedule.h"
#include "core/run/fault_injection.h"
#include "core/run/stop_signal.h"
#include "core/tasks/det_rng.h"
#include "core/tasks/task_factory.h"
#include "core/tracks/ar_track.h"
#include "core/tracks/episode_setup.h"
#include "parallel/gradient_reduction.h"
#include "parallel/tp_layers.h"

namespace tandem {

double ArTrack::warmstart() {
  double loss = 0;
  const int64_t steps = config_.tracks.ar.warmstart.steps;
  for (int64_t step = 0; step < steps; ++step) {
    fault::maybe_signal("warmstart", step);
    loss = warmstart_step(step);
    // A stop signal ends a long warm-start after the step in flight (all train ranks agree), not
    // after the first RL step: a scheduler's grace period is short. The trainer then exits.
    if (step + 1 == steps) break;
    if (const int stop = stop_signal_on_any(*comms_.world); stop > 0) {
      spdlog::info("warmstart stopped after step {} of {} by a stop signal", step + 1, steps);
      warmstart_stop_signal_ = stop;
      break;
    }
  }
  return loss;
}

std::vector<ArSample> ArTrack::demonstration_shard(int64_t step) {
  const ArWarmstartConfig& w = config_.tracks.ar.warmstart;
  const auto n = static_cast<int64_t>(warm_demos_.size());
  // Epochs in a fresh order each (Fisher-Yates on the run's seed: the same on every rank and host),
  // drawn once per epoch.
  const auto order = [&](int64_t epoch) -> const std::vector<int64_t>& {
    if (warm_order_epoch_ == epoch) return warm_order_;
    warm_order_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) warm_order_[static_cast<size_t>(i)] = i;
    tasks::DetRng rng(tasks::hash_combine(static_cast<uint64_t>(config_.run.seed) + 1, static_cast<uint64_t>(epoch)));
    for (int64_t i = n - 1; i > 0; --i)
      std::swap(warm_order_[static_cast<size_t>(i)], warm_order_[rng.below(static_cast<uint64_t>(i + 1))]);
    warm_order_epoch_ = epoch;
    return warm_order_;
  };
  std::vector<ArSample> out;
  for (int64_t j = dp_rank_; j < w.batch_size; j += dp_size_) {
    const int64_t g = step * w.batch_size + j;
    const int64_t k = order(g / n)[static_cast<size_t>(g % n)];
    out.push_back(env::demonstration_sample(*episodes_->conversation, warm_demos_[static_cast<size_t>(k)],
                                            format_->end_of_turn_id(), format_->system_prompt(),
                                            episodes_->limits.max_tokens,
                                            "demonstration " + std::to_string(k + 1) + " of " + *w.demos));
  }
  return out;
}

double ArTrack::warmstart_step(int64_t step) {
  const ArTrackConfig& ar = config_.tracks.ar;
  const ArWarmstartConfig& w = ar.warmstart;
  // With LoRA the warm-start trains the base itself, adapters off: it stands in for the pretrained
  // model a LoRA run starts from (the base is frozen again for RL).
  const bool base = policy_->has_adapters();
  const std::vector<torch::Tensor> params = base ? policy_->base_parameters() : policy_->parameters();
  std::optional<parallel::LoraOffGuard> adapters_off;
  if (base) adapters_off.emplace();
  if (step == 0) {
    if (base) {
      for (auto p : params) p.set_requires_grad(true);
      spdlog::info(
          "warmstart: tracks.ar.lora is on: the warm-start trains the base (adapters off), which RL then "
          "keeps frozen");
    }
    if (episodes_)
      warm_demos_ = env::read_demonstrations(*w.demos);
    else
      warm_source_ = tasks::make_ar_prompts(ar.data, config_.run.seed + 1);
    // No weight decay on the unified model: its image-only weights get no text gradient and would
    // only shrink (the Llama keeps AdamW's default decay, which its quickstart figures ran with).
    warm_opt_ = std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(w.lr).weight_decay(unified_.is_empty() ? 0.01 : 0.0));
  }
  std::vector<ArSample> samples;
  double local_tokens = 0;
  if (episodes_) {
    samples = demonstration_shard(step);
    for (const auto& s : samples) local_tokens += static_cast<double>(s.action_tokens());
  }
  const auto shard = episodes_ ? std::vector<tasks::ShardPrompt>()
                               : tasks::next_step_shard(*warm_source_, w.batch_size, dp_rank_, dp_size_);
  for (const auto& p : shard) {
    ArSample s;
    s.tokens = format_->encode(p.prompt.text);
    s.prompt_len = static_cast<int64_t>(s.tokens.size());
    auto answer = tokenizer_->encode(p.prompt.answer);
    if (!format_->stop_ids().empty()) answer.push_back(format_->end_of_turn_id());  // ends like a response
    s.tokens.insert(s.tokens.end(), answer.begin(), answer.end());
    s.response_mask.assign(answer.size(), 1);
    local_tokens += static_cast<double>(answer.size());
    samples.push_back(std::move(s));
  }
  const double lr = learning_rate(w.lr, w.schedule, w.warmup_steps, w.steps, step);
  set_learning_rate(*warm_opt_, lr);
  torch::Tensor n_tok = torch::tensor({local_tokens}, torch::kFloat64);
  comms_.dp->all_reduce(n_tok);  // token-mean over the whole batch, like the RL loss
  std::vector<const ArSample*> ptrs;
  for (const auto& s : samples) ptrs.push_back(&s);
  const PackedBatch b = collate_packed(ptrs, {}, dtype_);
  const auto out = policy_->forward_packed(b, false);
  const torch::Tensor mask = b.loss_mask.to(out.logp.device());
  const torch::Tensor loss = -(out.logp * mask).sum() / n_tok.item<double>();
  loss.backward();
  parallel::all_reduce_gradients(params, *comms_.grad);
  // Clipped at norm 1. Under tp by the whole model's norm (the shards' parts summed over tp), as the
  // RL step is; clip_grad_norm_ alone would see this rank's shards only.
  const parallel::TpShards tp{comms_.model_tp, policy_->tp_sharded(params)};
  if (tp.active()) {
    const parallel::GradientCheck check = parallel::check_gradients(params, true, *comms_.grad, tp);
    torch::NoGradGuard no_grad;
    if (check.norm > 1.0)
      for (auto& p : params) p.grad().mul_(1.0 / (check.norm + 1e-6));
  } else {
    torch::nn::utils::clip_grad_norm_(params, 1.0);
  }
  warm_opt_->step();
  warm_opt_->zero_grad();
  torch::Tensor l = torch::tensor({loss.item<double>()}, torch::kFloat64);
  comms_.dp->all_reduce(l);
  const double loss_value = l.item<double>();
  if ((step + 1) % std::max<int64_t>(1, w.steps / 10) == 0 || step + 1 == w.steps)
    spdlog::info("warmstart {}/{} | lr {:.3g} | {}-token NLL {:.4f}", step + 1, w.steps, learning_rate_of(*warm_opt_),
                 episodes_ ? "model-turn" : "answer", loss_value);
  if (step + 1 == w.steps) {
    warm_opt_.reset(), warm_source_.reset(), warm_demos_.clear(), warm_order_.clear(), warm_order_epoch_ = -1;
    if (base)
      for (auto p : params) p.mutable_grad() = torch::Tensor(), p.set_requires_grad(false);
  }
  return loss_value;
}

}  // namespace tandem
