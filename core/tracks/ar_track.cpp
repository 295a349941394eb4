// The AR track's step. Every rank of a dp group (its tp / cp peers) runs the same rollout with
// the same seeds, so they hold identical samples; the exchange and the metrics reduce over dp.
#include "core/tracks/ar_track.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "common/error.h"
#include "core/batch/group_filter.h"
#include "core/batch/rollout_bridge.h"
#include "core/batch/step_plan.h"
#include "core/grpo/advantage.h"
#include "core/policies/llama_policy.h"
#include "core/policies/text_policies.h"
#include "core/policies/unified_policy.h"
#include "core/rewards/reward_factory.h"
#include "core/run/fault_injection.h"
#include "core/run/metric_reduction.h"
#include "core/tasks/synthetic.h"
#include "core/tasks/task_factory.h"
#include "core/tracks/episode_setup.h"
#include "core/tracks/lora_checkpoint.h"
#include "core/tracks/track_metrics.h"
#include "models/llama/sampler.h"
#include "models/llama/weights.h"
#include "models/safetensors.h"
#include "models/unified/weights.h"
#include "parallel/vocab_parallel_logprob.h"
#include "runtime/host_memory.h"
#include "runtime/timing.h"

namespace tandem {

namespace {

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

std::unique_ptr<models::Tokenizer> make_tokenizer(const TokenizerConfig& t) {
  if (t.kind == TokenizerKind::kChar) return models::make_char_tokenizer(t.alphabet);
  return models::load_hf_tokenizer(*t.path);
}

}  // namespace

ArTrack::ArTrack(const Config& config, const TrainerComms& comms, torch::Device device, torch::Dtype dtype,
                 bool rollout_only)
    : config_(config), comms_(comms), device_(device), dtype_(dtype) {
  const ArTrackConfig& ar = config.tracks.ar;
  dp_rank_ = comms.dp->rank();
  dp_size_ = comms.dp->size();
  tokenizer_ = make_tokenizer(ar.tokenizer);
  check_tokenizer_fits(*tokenizer_, ar.model.vocab_size,
                       "tracks.ar.model.vocab_size: the tokenizer" +
                           (ar.model.hf_dir ? " (of the model in " + *ar.model.hf_dir + ")" : std::string()));
  format_ = std::make_unique<PromptFormat>(prompt_format_options(ar), *tokenizer_);
  spdlog::info("ar prompts: {}", format_->describe());
  const auto load_start = std::chrono::steady_clock::now();
  if (ar.model.hf_dir && ar.model.arch == ArArch::kLlama) source_ = read_model_dir(*ar.model.hf_dir);
  BuiltTextPolicy built =
      text_policy_spec(ar.model.arch)
          .build(config, parallel::ParallelContext::from(comms.model_tp, comms.model_cp), device, dtype);
  policy_ = std::move(built.policy);
  policy_->set_head_on_trained_rows(ar.env.enabled());
  unified_ = built.unified;
  int64_t n_params = 0;
  for (const auto& p : policy_->parameters()) n_params += p.numel();
  spdlog::info("ar policy: {} ({} parameters on this rank) {} in {:.2f} s (peak RSS so far {:.2f} GiB)",
               ar.model.hf_dir ? *ar.model.hf_dir : "random init", n_params, ar.model.hf_dir ? "loaded" : "built",
               seconds_since(load_start), static_cast<double>(peak_rss_bytes()) / (1 << 30));
  if (policy_->has_adapters()) {
    // Hashed once, at start-up: the weights the run loaded, and no long read inside a checkpoint.
    if (!rollout_only) base_identity_ = base_identity(ar);
    int64_t base = 0;
    for (const auto& p : policy_->base_parameters()) base += p.numel();
    spdlog::info(
        "ar lora: rank {}, alpha {} (scale {:.4g}), targets {}: {} adapter parameters trained on this rank ({:.2f}% "
        "of the frozen base's {}, kept in {}); the sampler uses base + adapters unmerged{}",
        ar.lora.rank, ar.lora.alpha, ar.lora.alpha / static_cast<double>(ar.lora.rank), join_names(ar.lora.targets),
        n_params, 100.0 * static_cast<double>(n_params) / static_cast<double>(base), base, c10::toString(dtype),
        ar.algo.kl.coef > 0 ? "; the KL reference is the base (adapters off)" : "");
  }
  if (ar.share_prompt == SharePrompt::kAuto && !rollout_only)
    spdlog::info("ar share_prompt auto: {}",
                 !unified_.is_empty() ? "not applied (the unified model's sampler has no KV cache to fork, and it runs "
                                        "packed micros as padded rows)"
                 : share_in_training()
                     ? "a group's prompt is prefilled once and laid out once in packed training micros"
                 : ar.env.samples == EnvSamples::kTurn
                     ? "a group's prompt is prefilled once; training: not applied (env.samples turn: a group's "
                       "turn samples have different contexts)"
                     : "a group's prompt is prefilled once; training: not applied under cp (context parallelism "
                       "splits each micro's rows over ranks)");
  if (ar.model.sliding_window && !rollout_only)
    spdlog::info(
        "ar sliding window {} ({}): packed micros holding a sequence longer than it run the materialised "
        "attention in those layers (the fused kernels take no window; memory quadratic in that micro's longest "
        "sequence); padded micros and decoding apply it on every kernel",
        *ar.model.sliding_window,
        ar.model.full_attention_layers.empty()
            ? std::string("every layer")
            : std::to_string(ar.model.num_layers - static_cast<int64_t>(ar.model.full_attention_layers.size())) +
                  " of " + std::to_string(ar.model.num_layers) + " layers; the others attend in full");
  if (ar.algo.kl.coef > 0 && !rollout_only) reference_ = policy_->frozen_copy();
  if (config.eval.enabled() && !rollout_only) {
    evaluator_ = std::make_unique<ArEvaluator>(config, *tokenizer_);
    spdlog::info("eval: {} held-out prompts x {} samples (+ greedy) every {} steps{}", evaluator_->prompt_count(),
                 config.eval.samples_per_prompt, config.eval.every, config.eval.at_start ? " and at the start" : "");
  }
  prompts_ = tasks::make_ar_prompts(ar.data, config.run.seed);
  reward_ = rewards::make_reward(ar.reward.kind, ar.reward.command, ar.reward.timeout_s);
  geometry_ = resolve_geometry(config.train, ar.micro_batch_size, ar.max_tokens_per_micro, ar.loss_agg_mode);
  update_.policy.clip_low = ar.algo.clip_low;
  update_.policy.clip_high = ar.algo.clip_high;
  update_.policy.clip_c = ar.algo.clip_c;
  update_.policy.ratio = ar.algo.ratio;
  update_.loss_agg_mode = geometry_.loss_agg_mode;
  update_.kl_coef = ar.algo.kl.coef;
  update_.kl_estimator = ar.algo.kl.estimator;
  update_.entropy_coef = ar.algo.entropy_coef;
  // The per-token floats (advantages, rollout log-probs) in the log-probs' dtype: bf16 would round
  // a rollout log-prob near -8 by up to 1/32, and the importance ratio with it.
  update_.dtype = parallel::logits_dtype(dtype);
  update_.reuse_old_logp = ar.algo.old_logp == OldLogp::kReuse;
  update_.report_entropy = ar.algo.old_logp != OldLogp::kRecompute;  // recompute reports it for free
  update_.tis_cap = ar.algo.tis_cap;
  if (ar.env.enabled() && !rollout_only) setup_env();
}

ArTrack::~ArTrack() = default;

models::SamplingParams ArTrack::sampling_params() const {
  const ArTrackConfig& ar = config_.tracks.ar;
  models::SamplingParams sp;
  sp.temperature = ar.rollout.temperature;
  sp.top_p = ar.rollout.top_p;
  sp.top_k = ar.rollout.top_k;
  sp.max_new_tokens = ar.rollout.max_new_tokens;
  sp.max_batch = ar.rollout.max_batch;
  sp.max_live = ar.rollout.max_live;
  sp.vocab_limit = std::min(tokenizer_->vocab_size(), ar.model.vocab_size);
  sp.stop_ids = format_->stop_ids();
  sp.share_prompts = ar.share_prompt == SharePrompt::kAuto;  // the Llama sampler; the unified one recomputes
  add_stop_strings(ar.rollout.stop, *tokenizer_, sp);
  return sp;
}

std::vector<ArSample> ArTrack::rollout(int64_t step, MetricMap& metrics) {
  const ArTrackConfig& ar = config_.tracks.ar;
  return generate_groups(step, tasks::next_step_shard(*prompts_, ar.rollout.prompts_per_step, dp_rank_, dp_size_),
                         metrics);
}

std::vector<ArSample> ArTrack::generate_groups(int64_t step, const std::vector<tasks::ShardPrompt>& shard,
                                               MetricMap& metrics) {
  const ArTrackConfig& ar = config_.tracks.ar;
  if (episodes_) return generate_episodes(step, shard, metrics);
  const auto t0 = std::chrono::steady_clock::now();
  const models::SamplingParams sp = sampling_params();
  std::vector<models::GenerationRequest> requests;
  std::vector<std::vector<int64_t>> prompt_ids;
  for (const auto& p : shard) {
    const std::vector<int64_t> ids = format_->encode(p.prompt.text);
    if (static_cast<int64_t>(ids.size()) + ar.rollout.max_new_tokens > policy_->max_seq_len())
      throw UserError("prompt " + std::to_string(p.prompt.id) + " has " + std::to_string(ids.size()) +
                      " tokens; with rollout.max_new_tokens " + std::to_string(ar.rollout.max_new_tokens) +
                      " it exceeds tracks.ar.model.max_seq_len " + std::to_string(policy_->max_seq_len()));
    prompt_ids.push_back(ids);
    for (int64_t k = 0; k < ar.rollout.group_size; ++k)
      requests.push_back({ids, models::sample_seed(config_.run.seed, step, p.slot, k)});
  }
  const auto gens = policy_->generate(requests, sp);
  metrics["time/generate_s"] += seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<ArSample> samples;
  std::vector<rewards::RewardInput> inputs;
  for (size_t j = 0; j < shard.size(); ++j)
    for (int64_t k = 0; k < ar.rollout.group_size; ++k) {
      const auto& g = gens[j * ar.rollout.group_size + k];
      ArSample s;
      s.tokens = prompt_ids[j];
      s.prompt_len = static_cast<int64_t>(s.tokens.size());
      s.tokens.insert(s.tokens.end(), g.tokens.begin(), g.tokens.end());
      s.response_mask.assign(g.tokens.size(), 1);
      s.rollout_logp = g.logp;
      s.group_id = shard[j].slot;
      s.index = shard[j].slot * ar.rollout.group_size + k;
      s.policy_version = policy_version_;
      inputs.push_back(
          {shard[j].prompt.text, tokenizer_->decode(g.tokens, /*skip_special=*/true), shard[j].prompt.answer, s.index});
      samples.push_back(std::move(s));
    }
  const std::vector<double> r = reward_->score(inputs);
  for (size_t i = 0; i < samples.size(); ++i) samples[i].reward = r[i];
  metrics["time/reward_s"] += seconds_since(t1);
  return samples;
}

void ArTrack::keep_shown(const std::vector<ArSample>& local) {
  shown_.clear();
  std::set<int64_t> groups;
  for (const auto& s : local) {
    if (static_cast<int64_t>(groups.size()) >= config_.run.sample_groups && !groups.count(s.group_id)) continue;
    groups.insert(s.group_id);
    shown_.push_back(s);
  }
}

std::vector<nlohmann::json> ArTrack::sample_records(int64_t groups) const {
  std::vector<nlohmann::json> out;
  std::set<int64_t> seen;
  for (const ArSample& s : shown_) {
    if (static_cast<int64_t>(seen.size()) >= groups && !seen.count(s.group_id)) continue;
    seen.insert(s.group_id);
    const std::vector<int64_t> prompt(s.tokens.begin(), s.tokens.begin() + s.prompt_len);
    const std::vector<int64_t> response(s.tokens.begin() + s.prompt_len, s.tokens.end());
    out.push_back({{"group", s.group_id},
                   {"sample", s.index},
                   {"prompt", tokenizer_->decode(prompt, /*skip_special=*/false)},
                   {"response", tokenizer_->decode(response, /*skip_special=*/false)},
                   {"reward", s.reward},
                   {"advantage", s.advantage},
                   {"response_tokens", s.response_len()}});
    if (episodes_) {
      // An episode's response holds the environment's turns too: its trained (model) runs apart.
      std::vector<std::string> turns;
      std::vector<int64_t> run;
      for (int64_t t = 0; t <= s.response_len(); ++t) {
        if (t < s.response_len() && s.response_mask[static_cast<size_t>(t)]) {
          run.push_back(s.tokens[static_cast<size_t>(s.prompt_len + t)]);
        } else if (!run.empty()) {
          turns.push_back(tokenizer_->decode(run, /*skip_special=*/false));
          run.clear();
        }
      }
      out.back()["model_turns"] = turns;
      out.back()["action_tokens"] = s.action_tokens();
    }
  }
  return out;
}

MetricMap ArTrack::evaluate(const std::string&, int64_t) {
  if (!evaluator_) return {};
  torch::NoGradGuard no_grad;
  if (!episodes_) return evaluator_->evaluate(*policy_, *reward_, *comms_.dp);
  const EpisodeEval episodes = episodes_->eval(config_.tracks.ar.env.slots);
  return evaluator_->evaluate(*policy_, *reward_, *comms_.dp, &episodes);
}

bool ArTrack::share_in_training() const {
  // The unified model runs packed micros as padded rows, and cp splits a micro's rows over ranks:
  // neither lays a prompt out once.
  // Turn samples of one group have different contexts, which the schedule's shared-prompt cost
  // (one prompt per run of a group's samples) does not describe.
  const ArEnvConfig& env = config_.tracks.ar.env;
  return config_.tracks.ar.share_prompt == SharePrompt::kAuto && unified_.is_empty() &&
         (comms_.model_cp == nullptr || comms_.model_cp->size() == 1) &&
         !(env.enabled() && env.samples == EnvSamples::kTurn);
}

int64_t ArTrack::policy_vocab_size() const { return config_.tracks.ar.model.vocab_size; }

int64_t ArTrack::ar_prompts_per_step() const { return config_.tracks.ar.rollout.prompts_per_step; }

void ArTrack::rollout_stats(const std::vector<ArSample>& local, MetricMap& metrics) {
  // Rewards and lengths over all samples of the step (before any filtering).
  MetricReduction r;
  add_reward_sums(local, r);
  r.sum("response_tokens", 0);
  r.sum("sampled_tokens", 0);
  r.max("response_len_max", 0);
  // An episode's response holds the environment's and the template's tokens besides the sampled
  // ones (its mask-1 tokens): only those count as generated.
  const bool episodes = config_.tracks.ar.env.enabled();
  for (const auto& s : local) {
    r.sum("response_tokens", static_cast<double>(s.response_len()));
    r.sum("sampled_tokens", static_cast<double>(episodes ? s.action_tokens() : s.response_len()));
    r.max("response_len_max", static_cast<double>(s.response_len()));
  }
  r.reduce(*comms_.dp);
  write_reward_metrics(r, metrics);
  metrics["response/len_mean"] = r.ratio("response_tokens", "samples");
  metrics["response/len_max"] = r["response_len_max"];
  // Generated tokens of every dp rank over this rank's generation time (tp / cp peers count once).
  if (metrics["time/generate_s"] > 0)
    metrics["perf/rollout_tokens_per_s"] = r["sampled_tokens"] / metrics["time/generate_s"];
}

void ArTrack::set_advantages(std::vector<ArSample>& local) const {
  const ArAlgoConfig& algo = config_.tracks.ar.algo;
  std::vector<double> rewards;
  std::vector<int64_t> groups;
  for (const auto& s : local) rewards.push_back(s.reward), groups.push_back(s.group_id);
  AdvantageOptions ao;
  ao.norm_by_std = algo.norm_by_std;
  ao.eps = algo.adv_eps;
  ao.clip = algo.adv_clip;
  const torch::Tensor adv = grpo_advantages(torch::tensor(rewards, torch::kFloat64), torch::tensor(groups), ao);
  for (size_t i = 0; i < local.size(); ++i) local[i].advantage = adv[i].item<double>();
}

ScheduleOptions ArTrack::schedule_options() const {
  const ArTrackConfig& ar = config_.tracks.ar;
  ScheduleOptions so;
  so.dp = dp_size_;
  so.num_mini_batches = config_.train.num_mini_batches;
  so.micro_batch_size = geometry_.micro_batch_size;
  so.max_tokens_per_micro = geometry_.max_tokens_per_micro;
  so.l_norm = static_cast<double>(ar.algo.loss_norm_len.value_or(ar.rollout.max_new_tokens));
  // cp shards packed micros only; tp and dp take either layout.
  so.layout = comms_.model_cp != nullptr && comms_.model_cp->size() > 1 ? BatchLayout::kPacked : ar.layout;
  so.share_prompts = share_in_training();
  return so;
}

void ArTrack::schedule_metrics(const ScheduleOptions& so, MetricMap& metrics) const {
  const ScheduleStats ss = schedule_stats(schedule_, directory_.costs, so);
  metrics["schedule/balance"] = ss.balance;
  metrics["schedule/micros"] = static_cast<double>(ss.micros);
  double padded = 0, rows = 0, unshared = 0;
  for (const auto& mini : schedule_.minis)
    for (const auto& rank : mini.ranks)
      for (const auto& micro : rank.micros) {
        padded += micro.padded ? 1 : 0;
        rows += static_cast<double>(micro.tokens);
        for (int64_t i : micro.samples) unshared += static_cast<double>(directory_.costs[i].tokens);
      }
  metrics["schedule/padded_micros"] = padded;
  // The share of the batch's token rows that shared prompts spared each training forward.
  metrics["schedule/shared_rows_frac"] = unshared > 0 ? 1.0 - rows / unshared : 0.0;
}

std::vector<ArSample> ArTrack::receive_rollout(int64_t step, MetricMap& metrics) {
  const ArTrackConfig& ar = config_.tracks.ar;
  const auto t0 = std::chrono::steady_clock::now();
  // The cursor advances exactly as on a colocated rank, so checkpoints resume the same stream.
  const auto shard = tasks::next_step_shard(*prompts_, ar.rollout.prompts_per_step, dp_rank_, dp_size_);
  std::vector<ArSample> all = bridge_samples(*comms_.bridge, {});
  std::vector<ArSample> local;
  for (auto& s : all)
    for (const auto& p : shard)
      if (s.group_id == p.slot) local.push_back(std::move(s));
  if (local.size() != shard.size() * static_cast<size_t>(ar.rollout.group_size))
    throw std::logic_error("ArTrack: rollout ranks sent " + std::to_string(local.size()) +
                           " samples for this rank, "
                           "expected " +
                           std::to_string(shard.size() * ar.rollout.group_size));
  std::sort(local.begin(), local.end(), [](const ArSample& a, const ArSample& b) { return a.index < b.index; });
  std::vector<int64_t> lags;
  const int64_t dropped = drop_stale(local, step, ar.rollout.max_staleness, lags);
  std::vector<double> counts(lags.begin(), lags.end());
  counts.push_back(static_cast<double>(dropped));
  torch::Tensor t = torch::tensor(counts, torch::kFloat64);
  comms_.dp->all_reduce(t);
  double lag_sum = 0, kept = 0;
  for (size_t k = 0; k < lags.size(); ++k) {
    metrics["rollout/lag_" + std::to_string(k)] = t[static_cast<int64_t>(k)].item<double>();
    lag_sum += static_cast<double>(k) * t[static_cast<int64_t>(k)].item<double>();
    kept += t[static_cast<int64_t>(k)].item<double>();
  }
  metrics["rollout/lag_mean"] = kept > 0 ? lag_sum / kept : 0;
  metrics["rollout/stale_dropped"] = t[static_cast<int64_t>(lags.size())].item<double>();
  metrics["time/wait_rollout_s"] = seconds_since(t0);
  return local;
}

void ArTrack::publish_start(int64_t start_step) {
  start_step_ = start_step;
  policy_version_ = start_step;
  nlohmann::json j{{"start_step", start_step}, {"data_cursor", prompts_->cursor()}};
  bridge_string(*comms_.bridge, j.dump());
  const std::vector<torch::Tensor> base = start_only_parameters();
  if (!base.empty()) bridge_weights(*comms_.bridge, base, start_step, /*apply=*/false);
  publish_weights(start_step);
}

std::vector<torch::Tensor> ArTrack::start_only_parameters() {
  if (!policy_->has_adapters() || config_.tracks.ar.model.hf_dir) return {};
  return policy_->base_parameters();
}

void ArTrack::publish_weights(int64_t version) {
  const auto t0 = std::chrono::steady_clock::now();
  bridge_weights(*comms_.bridge, policy_->parameters(), version, /*apply=*/false);
  publish_s_ += seconds_since(t0);
}

void ArTrack::prepare(int64_t step, MetricMap& metrics) {
  const ArTrackConfig& ar = config_.tracks.ar;
  step_ = step;
  fault::maybe_signal("rollout", step);
  if (!comms_.bridge) policy_version_ = step;  // colocated: sampled by the weights about to train
  publish_s_ = 0;
  std::vector<ArSample> local;
  if (config_.train.overlap) {
    local = prepare_overlapped(step, metrics);
    keep_shown(local);
    rollout_stats(local, metrics);
    schedule_metrics(schedule_options(), metrics);
    outcome_ = MicroOutcome{};
    return;
  }
  if (comms_.bridge) {
    local = receive_rollout(step, metrics);
    const StalenessProtocol protocol{start_step_, config_.run.steps, ar.rollout.max_staleness};
    if (protocol.publish_after_receive(step)) publish_weights(step);  // step t + 1 samples with these
  } else {
    local = ar.rollout.replay_dir ? replay(step) : rollout(step, metrics);
  }
  rollout_stats(local, metrics);

  if (!ar.rollout.replay_dir) {
    if (ar.algo.filter_zero_variance_groups) {
      MetricReduction r;
      r.sum("dropped", static_cast<double>(drop_zero_variance_groups(local)));
      r.reduce(*comms_.dp);
      metrics["rollout/filtered_samples"] = r["dropped"];
    }
    set_advantages(local);
    if (ar.rollout.dump) dump(step, local);
    keep_shown(local);
  }
  if (ar.env.enabled() && ar.env.samples == EnvSamples::kTurn) {
    // After the advantages: a group's statistics are over its episodes, not its turns.
    std::vector<ArSample> turns;
    for (const ArSample& episode : local)
      for (ArSample& t : split_turns(episode)) turns.push_back(std::move(t));
    MetricReduction r;
    r.sum("turn_samples", static_cast<double>(turns.size()));
    r.reduce(*comms_.dp);
    metrics["env/turn_samples"] = r["turn_samples"];
    local = std::move(turns);
  }

  const auto t0 = std::chrono::steady_clock::now();
  const ScheduleOptions so = schedule_options();
  const std::vector<SampleCost> costs = costs_of(local);
  StepPlan<ArSample> plan = plan_and_exchange(local, costs, so, *comms_.dp);
  directory_ = std::move(plan.directory), schedule_ = std::move(plan.schedule), mine_ = std::move(plan.mine);
  schedule_metrics(so, metrics);
  metrics["time/exchange_s"] = seconds_since(t0);

  const auto t1 = std::chrono::steady_clock::now();
  old_logp_.clear();
  double entropy[2] = {0, 0};
  if (ar.algo.old_logp == OldLogp::kRecompute) {
    old_logp_ = forward_micros(*policy_, schedule_, directory_, mine_, entropy);
    reduce_entropy(entropy, metrics);
  }
  metrics["time/old_logp_s"] = seconds_since(t1);
  const auto t2 = std::chrono::steady_clock::now();
  ref_logp_.clear();
  if (reference_) ref_logp_ = forward_micros(*reference_, schedule_, directory_, mine_, nullptr);
  metrics["time/ref_logp_s"] = seconds_since(t2);
  outcome_ = MicroOutcome{};
}

std::vector<const ArSample*> ArTrack::micro_samples(const MicroBatch& micro) const {
  return samples_of(micro, directory_, mine_);
}

std::vector<std::vector<torch::Tensor>> ArTrack::forward_micros(PolicyModel& policy, const Schedule& schedule,
                                                                const RolloutDirectory& directory,
                                                                const std::vector<ArSample>& mine, double* entropy) {
  torch::NoGradGuard no_grad;
  std::vector<std::vector<torch::Tensor>> out;
  for (const auto& mini : schedule.minis) {
    out.emplace_back();
    for (const auto& micro : mini.ranks[dp_rank_].micros) {
      // The training forward's own layout, so the first update's ratio is exactly 1.
      PolicyModel::Output o;
      torch::Tensor loss_mask;  // (N) or (B, T)
      if (micro.padded) {
        const PaddedBatch b = collate_padded(samples_of(micro, directory, mine), micro.denominators, dtype_);
        o = policy.forward_padded(b, entropy != nullptr), loss_mask = b.loss_mask;
      } else {
        const PackedBatch b =
            collate_packed(samples_of(micro, directory, mine), micro.denominators, dtype_, micro.share_prompts);
        o = policy.forward_packed(b, entropy != nullptr), loss_mask = b.loss_mask;
      }
      out.back().push_back(o.logp.detach());
      if (entropy && o.entropy.defined()) {
        const torch::Tensor m = loss_mask.to(o.entropy.device()) != 0;
        entropy[0] += o.entropy.masked_select(m).sum().item<double>();
        entropy[1] += m.sum().item<double>();
      }
    }
  }
  return out;
}

void ArTrack::reduce_entropy(const double entropy[2], MetricMap& metrics) const {
  MetricReduction r;
  r.sum("entropy", entropy[0]);
  r.sum("tokens", entropy[1]);
  r.reduce(*comms_.dp);
  metrics["entropy"] = r.ratio("entropy", "tokens");
}

void ArTrack::accumulate(int64_t mini, double weight, MetricMap& metrics) {
  const auto t0 = std::chrono::steady_clock::now();
  UpdateOptions o = update_;
  o.after_backward = [this] { after_backward(); };
  o.loss_weight = weight;
  loss_finite_ = true;
  const auto& micros = schedule_.minis[mini].ranks[dp_rank_].micros;
  for (size_t k = 0; k < micros.size(); ++k) {
    const torch::Tensor old = old_logp_.empty() ? torch::Tensor() : old_logp_[mini][k];
    const torch::Tensor ref = ref_logp_.empty() ? torch::Tensor() : ref_logp_[mini][k];
    o.packed = !micros[k].padded;
    o.share_prompts = micros[k].share_prompts;
    MicroOutcome m = train_micro(*policy_, micro_samples(micros[k]), micros[k].denominators, o, old, ref);
    if (mini == 0 && k == 0 && fault::nan_loss(comms_.world->rank(), step_)) m.loss = std::nan("");
    loss_finite_ = loss_finite_ && std::isfinite(m.loss);
    if (mini == 0) metrics["pg/first_ratio_max_dev"] = std::max(metrics["pg/first_ratio_max_dev"], m.ratio_max_dev);
    outcome_ += m;
  }
  metrics["time/train_s"] += seconds_since(t0);
}

void ArTrack::finish(MetricMap& metrics) {
  const MicroOutcome& o = outcome_;
  MetricReduction r;
  r.sum("loss", o.loss);
  r.sum("tokens", o.stats.tokens);
  r.sum("clipped", o.stats.clipped);
  r.sum("dual_clipped", o.stats.dual_clipped);
  r.sum("approx_kl", o.stats.approx_kl_sum);
  r.sum("kl", o.kl_sum);
  r.sum("entropy", o.entropy_sum);
  r.sum("tis_weight", o.tis_weight_sum);
  r.sum("tis_capped", o.tis_capped);
  r.sum("loss_nonfinite", loss_finite_ ? 0 : 1);
  r.max("first_ratio_dev", metrics["pg/first_ratio_max_dev"]);
  r.max("ratio_dev", o.ratio_max_dev);
  r.reduce(*comms_.dp);
  const double tokens = r["tokens"];
  metrics["loss"] = r["loss"] / static_cast<double>(schedule_.minis.size());
  metrics["pg/clipfrac"] = r.ratio("clipped", "tokens");
  metrics["pg/dual_clipfrac"] = r.ratio("dual_clipped", "tokens");
  metrics["pg/approx_kl"] = r.ratio("approx_kl", "tokens");
  metrics["pg/first_ratio_max_dev"] = r["first_ratio_dev"];
  metrics["pg/ratio_max_dev"] = r["ratio_dev"];
  if (reference_) metrics["kl"] = r.ratio("kl", "tokens");
  if (config_.tracks.ar.algo.old_logp != OldLogp::kRecompute) metrics["entropy"] = r.ratio("entropy", "tokens");
  metrics["train/action_tokens"] = tokens;
  if (update_.tis_cap)
    metrics["tis/weight_mean"] = r.ratio("tis_weight", "tokens"),
    metrics["tis/capped_frac"] = r.ratio("tis_capped", "tokens");
  if (comms_.bridge) metrics["time/publish_weights_s"] = publish_s_;
  // Each action token is trained once per step; tp / cp peers count the same tokens once.
  metrics["perf/train_tokens_per_s"] = metrics["time/train_s"] > 0 ? tokens / metrics["time/train_s"] : 0;
}

void ArTrack::refresh_reference() {
  if (reference_) reference_ = policy_->frozen_copy();
}

}  // namespace tandem
