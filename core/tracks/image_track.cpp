// FlowGRPO (Liu et al. 2025) in the engine's data path. Departures from the reference code:
// each sample's trained timesteps come from its own seeded permutation (not a batch shuffle), so
// they do not depend on the layout; the loss is aggregated over the whole mini-batch with the
// schedule's denominators (the reference averages per micro and per timestep).
#include "core/tracks/image_track.h"

#include "core/batch/step_plan.h"
#include "core/run/metric_reduction.h"
#include "core/tracks/track_metrics.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include "common/error.h"
#include "common/write_file.h"
#include "core/grpo/advantage.h"
#include "core/io/image_io.h"
#include "core/policies/unified_policy.h"
#include "core/rewards/image_rewards.h"
#include "core/rewards/reward_factory.h"
#include "core/rewards/shape_classifier.h"
#include "core/tasks/shapes.h"
#include "models/dit/flow_sde.h"
#include "models/dit/sampler.h"
#include "models/layers/lora_linear.h"
#include "models/safetensors.h"
#include "models/unified/flow.h"
#include "runtime/timing.h"

#include <fstream>

namespace fs = std::filesystem;

namespace tandem {

namespace {

constexpr uint64_t kImageLoraSeedOffset = 0x494c6f52;  // "ILoR"

uint64_t mix(uint64_t x) {  // SplitMix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The class of prompt slot j of a step: a pure function of (seed, step, j), whatever the layout.
int64_t slot_label(uint64_t seed, int64_t step, int64_t slot, int64_t num_classes) {
  return static_cast<int64_t>(mix(mix(mix(seed) ^ static_cast<uint64_t>(step)) ^ static_cast<uint64_t>(slot)) %
                              static_cast<uint64_t>(num_classes));
}

// `count` of the `steps` transitions, chosen by a Fisher-Yates shuffle from the sample's own
// stream (std::shuffle's algorithm is implementation-defined), ascending.
std::vector<int64_t> pick_timesteps(uint64_t seed, int64_t steps, int64_t count) {
  std::vector<int64_t> t(steps);
  std::iota(t.begin(), t.end(), 0);
  std::mt19937_64 rng(seed);
  for (int64_t i = steps - 1; i > 0; --i)
    std::swap(t[i], t[static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1))]);
  t.resize(count);
  std::sort(t.begin(), t.end());
  return t;
}

models::DitConfig dit_config(const ImageModelConfig& m) {
  models::DitConfig c;
  c.image_size = m.image_size;
  c.channels = m.channels;
  c.patch_size = m.patch_size;
  c.hidden_size = m.hidden_size;
  c.num_layers = m.num_layers;
  c.num_heads = m.num_heads;
  c.num_classes = m.num_classes;
  return c;
}

std::unique_ptr<models::FlowModel> make_dit(const ImageModelConfig& m, uint64_t seed, torch::Device device,
                                            torch::Dtype dtype) {
  torch::manual_seed(seed);  // the DiT's init draws from the global generator
  models::Dit dit(dit_config(m));
  dit->to(device, dtype);
  return std::make_unique<models::DitFlow>(dit);
}

std::vector<int64_t> ids_of(const std::vector<const ImageSample*>& samples) {
  std::vector<int64_t> ids;
  for (const auto* s : samples) ids.push_back(s->index);
  return ids;
}

}  // namespace

ImageTrack::ImageTrack(const Config& config, const TrainerComms& comms, torch::Device device, torch::Dtype dtype,
                       models::UnifiedModel shared_model, const models::Tokenizer* tokenizer)
    : config_(config), comms_(comms), device_(device), dtype_(dtype) {
  const ImageTrackConfig& im = config.tracks.image;
  dp_rank_ = comms.dp->rank();
  dp_size_ = comms.dp->size();
  tasks::validate_shapes_options({im.model.image_size, im.model.channels, im.model.num_classes, 0});
  if (im.model.arch == ImageArch::kShared) {
    if (shared_model.is_empty() || tokenizer == nullptr)
      throw std::logic_error("ImageTrack: arch shared needs the AR track's unified model and tokenizer");
    const auto prompts = class_prompts(*tokenizer, im.model.num_classes);
    flow_ = std::make_unique<models::UnifiedFlow>(shared_model, prompts);
    // tracks.ar.lora's adapters are this track's too; their KL reference is the base, adapters off.
    if (models::has_lora(*shared_model))
      lora_root_ = shared_model.get();
    else if (im.algo.kl.coef > 0)
      reference_ = std::make_unique<models::UnifiedFlow>(frozen_copy(*shared_model), prompts);
  } else {
    flow_ = make_dit(im.model, static_cast<uint64_t>(config.run.seed) + 17, device, dtype);
    if (im.lora.enabled()) {
      lora_dit_ = static_cast<models::DitFlow&>(*flow_).module().get();
      lora_root_ = lora_dit_;
      lora_spec_ = {im.lora.rank, im.lora.alpha, im.lora.targets};
      if (lora_spec_.targets == std::vector<std::string>{"all-linear"}) lora_spec_.targets = models::lora_dit_names();
      const models::LoraSpec& spec = lora_spec_;
      models::attach_lora(*lora_dit_, spec, static_cast<uint64_t>(config.run.seed) + kImageLoraSeedOffset);
      std::string names;
      for (const auto& t : spec.targets) names += (names.empty() ? "" : ", ") + t;
      int64_t adapters = 0, base = 0;
      for (const auto& p : models::lora_parameters(*lora_dit_)) adapters += p.numel();
      for (const auto& p : models::base_parameters(*lora_dit_)) base += p.numel();
      spdlog::info(
          "image lora: rank {}, alpha {} (scale {:.4g}), targets {}: {} adapter parameters trained ({:.2f}% of the "
          "frozen base's {}); sampling and eval use base + adapters unmerged{}",
          spec.rank, spec.alpha, spec.scale(), names, adapters,
          100.0 * static_cast<double>(adapters) / static_cast<double>(base), base,
          kl_on() ? "; the KL reference is the base (adapters off)" : "");
    } else if (im.algo.kl.coef > 0) {
      reference_ = make_dit(im.model, static_cast<uint64_t>(config.run.seed) + 17, device, dtype);
      for (auto& p : reference_->parameters()) p.set_requires_grad(false);
    }
  }
  refresh_reference();
  if (im.reward.kind == "command") {
    command_reward_ = rewards::make_reward("command", im.reward.command, im.reward.timeout_s);
  } else {
    rewards::ImageRewardOptions ro;
    ro.image_size = im.model.image_size, ro.channels = im.model.channels, ro.num_classes = im.model.num_classes;
    reward_ = rewards::make_image_reward(im.reward.kind, ro);
  }
  geometry_ = resolve_geometry(config.train, im.micro_batch_size, im.max_tokens_per_micro, im.loss_agg_mode);
  train_timesteps_ =
      std::max<int64_t>(1, std::llround(static_cast<double>(im.sampler.steps) * im.sampler.timestep_fraction));
}

ImageTrack::~ImageTrack() = default;

std::vector<torch::Tensor> ImageTrack::parameters() {
  return lora_root_ ? models::lora_parameters(*lora_root_) : flow_->parameters();
}

std::string ImageTrack::write_samples(const std::string& run_dir, int64_t completed) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%06lld.png", static_cast<long long>(completed));
  const std::string path = run_dir + "/samples/" + name;
  const double accuracy = write_sample_grid(path);
  return fmt::format("samples: {} (+ .json: prompts; shape classifier agrees with {:.0f}% of cells)", path,
                     100 * accuracy);
}

void ImageTrack::refresh_reference() {
  if (!reference_) return;
  torch::NoGradGuard no_grad;
  const auto src = flow_->named_tensors();
  reference_->load_tensors(src, "the image policy");
}

std::vector<double> ImageTrack::score(const torch::Tensor& images, const std::vector<int64_t>& labels,
                                      const std::vector<int64_t>& ids) {
  if (reward_) return reward_->score(images, labels);
  // External reward: each image as a PNG file; the request's response is its path.
  const fs::path dir = fs::temp_directory_path() / ("tandem_images_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<rewards::RewardInput> inputs;
  for (int64_t i = 0; i < images.size(0); ++i) {
    const std::string path = (dir / (std::to_string(ids[i]) + ".png")).string();
    write_png_grid(path, images.slice(0, i, i + 1), 1, /*padding=*/0);  // the image alone, no grid frame
    inputs.push_back({tasks::shape_name(labels[i]), path, std::to_string(labels[i]), ids[i]});
  }
  auto out = command_reward_->score(inputs);
  fs::remove_all(dir);
  return out;
}

void ImageTrack::prepare(int64_t step, MetricMap& metrics) {
  const ImageTrackConfig& im = config_.tracks.image;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> labels, ids, slots;
  std::vector<models::NoiseKey> keys;
  for (int64_t j = dp_rank_; j < im.rollout.prompts_per_step; j += dp_size_)
    for (int64_t k = 0; k < im.rollout.group_size; ++k) {
      labels.push_back(slot_label(config_.run.seed, step, j, im.model.num_classes));
      keys.push_back({static_cast<uint64_t>(config_.run.seed), step, j, k});
      ids.push_back(j * im.rollout.group_size + k);
      slots.push_back(j);
    }
  models::SdeSamplerOptions so{im.sampler.steps, im.sampler.noise_level, im.sampler.shift, im.sampler.cfg};
  std::vector<ImageSample> local;
  if (!labels.empty()) {
    const torch::Tensor label_t = torch::tensor(labels, torch::kInt64).to(device_);
    const models::SdeRollout r = models::sample_sde(*flow_, label_t, keys, so);
    metrics["time/generate_s"] = seconds_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    // The whole rollout crosses to the host in three copies, not three per sample; each sample
    // holds views of its rows (as on the CPU before, where .to(kCPU) was already a view).
    const torch::Tensor latents = r.latents.to(torch::kCPU);           // (B, steps + 1, C, H, W)
    const torch::Tensor log_probs = r.log_probs.to(torch::kCPU);       // (B, steps)
    const torch::Tensor sigmas = r.sigmas.to(torch::kCPU);             // (steps + 1)
    const torch::Tensor images = latents.select(1, im.sampler.steps);  // (B, C, H, W)
    const std::vector<double> rewards = score(images, labels, ids);
    metrics["time/reward_s"] = seconds_since(t1);
    for (size_t i = 0; i < labels.size(); ++i) {
      ImageSample s;
      s.latents = latents[static_cast<int64_t>(i)];
      s.log_probs = log_probs[static_cast<int64_t>(i)];
      s.sigmas = sigmas;
      s.class_label = labels[i];
      s.group_id = slots[i];
      s.index = ids[i];
      s.reward = rewards[i];
      s.train_timesteps = pick_timesteps(models::noise_seed(keys[i]) ^ 0x7157ULL, im.sampler.steps, train_timesteps_);
      local.push_back(std::move(s));
    }
  }
  {
    MetricReduction r;
    add_reward_sums(local, r);
    r.reduce(*comms_.dp);
    write_reward_metrics(r, metrics);  // rollout/samples: every rank's, the image track's throughput unit
  }
  std::vector<double> rs;
  std::vector<int64_t> gs;
  for (const auto& s : local) rs.push_back(s.reward), gs.push_back(s.group_id);
  AdvantageOptions ao;
  ao.clip = im.algo.adv_clip_max;
  const torch::Tensor adv = grpo_advantages(torch::tensor(rs, torch::kFloat64), torch::tensor(gs, torch::kInt64), ao);
  for (size_t i = 0; i < local.size(); ++i) local[i].advantage = adv[i].item<double>();

  const auto t2 = std::chrono::steady_clock::now();
  std::vector<SampleCost> costs;
  for (const auto& s : local) costs.push_back({image_tokens_per_sample(im.model), train_timesteps_, s.group_id});
  ScheduleOptions sch;
  sch.dp = dp_size_;
  sch.num_mini_batches = config_.train.num_mini_batches;
  sch.micro_batch_size = geometry_.micro_batch_size;
  sch.max_tokens_per_micro = geometry_.max_tokens_per_micro;
  // seq-mean-token-sum-norm's L_norm: every sample trains exactly train_timesteps_ "tokens", as the
  // AR track's default is its longest response (else it divided by 1: a sum over the timesteps).
  sch.l_norm = static_cast<double>(train_timesteps_);
  StepPlan<ImageSample> plan = plan_and_exchange(local, costs, sch, *comms_.dp);
  directory_ = std::move(plan.directory), schedule_ = std::move(plan.schedule), mine_ = std::move(plan.mine);
  metrics["schedule/micros"] = static_cast<double>(schedule_stats(schedule_, directory_.costs, sch).micros);
  metrics["geometry/micro_batch_size"] = static_cast<double>(geometry_.micro_batch_size.value_or(0));
  metrics["geometry/max_tokens_per_micro"] = static_cast<double>(geometry_.max_tokens_per_micro.value_or(0));
  metrics["time/exchange_s"] = seconds_since(t2);

  const auto t3 = std::chrono::steady_clock::now();
  old_logp_.clear();
  old_slices_.clear();
  ref_mean_.clear();
  {
    torch::NoGradGuard no_grad;
    for (const auto& mini : schedule_.minis) {
      old_logp_.emplace_back();
      old_slices_.emplace_back();
      ref_mean_.emplace_back();
      for (const auto& micro : mini.ranks[dp_rank_].micros) {
        const auto samples = micro_samples(micro);
        std::vector<torch::Tensor> cols;
        ref_mean_.back().emplace_back();
        for (int64_t k = 0; k < train_timesteps_; ++k) {
          if (im.algo.old_logp == OldLogp::kRecompute) cols.push_back(transition(*flow_, samples, k).log_prob);
          if (kl_on()) ref_mean_.back().back().push_back(reference_transition(samples, k).mean);
        }
        // On the host in float64, as the training step's new log-probs are: a CUDA run's transition
        // log-probs are on the GPU, and the ratio mixed the two devices.
        old_logp_.back().push_back(cols.empty() ? torch::Tensor()
                                                : torch::stack(cols, 1).to(torch::kCPU).to(torch::kFloat64));  // (B, T)
        old_slices_.back().push_back(ids_of(samples));
      }
    }
    if (hooks_.old_logp_micro_batch_size && im.algo.old_logp == OldLogp::kRecompute) recompute_old_logp_for_test();
  }
  metrics["time/old_logp_s"] = seconds_since(t3);
  loss_sum_ = kl_sum_ = first_ratio_dev_ = ratio_dev_ = 0;
  stats_ = PolicyStats{};
}

void ImageTrack::check_old_logp_slice(int64_t mini, size_t micro,
                                      const std::vector<const ImageSample*>& samples) const {
  const std::vector<int64_t> ids = ids_of(samples);
  const std::vector<int64_t>& old = old_slices_.at(static_cast<size_t>(mini)).at(micro);
  if (ids == old) return;
  auto list = [](const std::vector<int64_t>& v) {
    std::string out;
    for (int64_t x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
    return "[" + out + "]";
  };
  throw std::logic_error("image track: the old log-probs of mini-batch " + std::to_string(mini) + " micro " +
                         std::to_string(micro) + " were computed in the micro " + list(old) +
                         ", not in the training micro " + list(ids) +
                         "; old log-probs must come from exactly the training slices or the first ratio is not 1");
}

void ImageTrack::recompute_old_logp_for_test() {
  // This rank's samples of each mini-batch, cut into micros of the other size.
  const auto size = static_cast<size_t>(*hooks_.old_logp_micro_batch_size);
  std::map<int64_t, torch::Tensor> row;                 // sample id -> (T) old log-probs
  std::map<int64_t, std::vector<int64_t>> computed_in;  // sample id -> the other micro's ids
  for (const auto& mini : schedule_.minis) {
    std::vector<const ImageSample*> all;
    for (const auto& micro : mini.ranks[dp_rank_].micros)
      for (const auto* s : micro_samples(micro)) all.push_back(s);
    for (size_t first = 0; first < all.size(); first += size) {
      const std::vector<const ImageSample*> samples(
          all.begin() + static_cast<long>(first), all.begin() + static_cast<long>(std::min(all.size(), first + size)));
      std::vector<torch::Tensor> cols;
      for (int64_t k = 0; k < train_timesteps_; ++k) cols.push_back(transition(*flow_, samples, k).log_prob);
      const torch::Tensor t = torch::stack(cols, 1).to(torch::kCPU).to(torch::kFloat64);  // (B, T)
      const std::vector<int64_t> ids = ids_of(samples);
      for (size_t i = 0; i < samples.size(); ++i)
        row[samples[i]->index] = t[static_cast<int64_t>(i)], computed_in[samples[i]->index] = ids;
    }
  }
  for (size_t mi = 0; mi < schedule_.minis.size(); ++mi) {
    const auto& micros = schedule_.minis[mi].ranks[dp_rank_].micros;
    for (size_t m = 0; m < micros.size(); ++m) {
      const auto samples = micro_samples(micros[m]);
      if (samples.empty()) continue;
      std::vector<torch::Tensor> rows;
      for (const auto* s : samples) rows.push_back(row.at(s->index));
      old_logp_[mi][m] = torch::stack(rows);  // (B, T)
      old_slices_[mi][m] = computed_in.at(samples.front()->index);
    }
  }
}

std::vector<const ImageSample*> ImageTrack::micro_samples(const MicroBatch& micro) const {
  return samples_of(micro, directory_, mine_);
}

ImageTrack::Transition ImageTrack::transition(models::FlowModel& model, const std::vector<const ImageSample*>& samples,
                                              size_t k) const {
  const SamplerConfig& sc = config_.tracks.image.sampler;
  std::vector<torch::Tensor> x, x_next;
  std::vector<double> sigma, sigma_next;
  std::vector<int64_t> labels;
  for (const ImageSample* s : samples) {
    const int64_t t = s->train_timesteps[k];
    x.push_back(s->latents[t]);
    x_next.push_back(s->latents[t + 1]);
    sigma.push_back(s->sigmas[t].item<double>());
    sigma_next.push_back(s->sigmas[t + 1].item<double>());
    labels.push_back(s->class_label);
  }
  const double sigma_max = samples.front()->sigmas[1].item<double>();
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(device_);
  const auto r = models::transition_log_prob(model, torch::stack(x).to(device_), torch::stack(x_next).to(device_),
                                             torch::tensor(sigma, opts), torch::tensor(sigma_next, opts),
                                             torch::tensor(labels, torch::kInt64).to(device_), sc.noise_level,
                                             sigma_max, sc.cfg, config_.tracks.image.algo.cfg_grad == CfgGrad::kFull);
  return {r.log_prob, r.mean, r.std_dev_t};
}

ImageTrack::Transition ImageTrack::reference_transition(const std::vector<const ImageSample*>& samples,
                                                        size_t k) const {
  if (reference_) return transition(*reference_, samples, k);
  parallel::LoraOffGuard adapters_off;
  return transition(*flow_, samples, k);
}

void ImageTrack::accumulate(int64_t mini, double weight, MetricMap& metrics) {
  const ImageTrackConfig& im = config_.tracks.image;
  const auto t0 = std::chrono::steady_clock::now();
  const auto& micros = schedule_.minis[mini].ranks[dp_rank_].micros;
  PolicyLossOptions po;
  po.clip_low = po.clip_high = im.algo.clip_range;
  po.clip_c.reset();
  loss_finite_ = true;
  for (size_t m = 0; m < micros.size(); ++m) {
    const auto samples = micro_samples(micros[m]);
    const int64_t b = static_cast<int64_t>(samples.size());
    if (im.algo.old_logp == OldLogp::kRecompute && !hooks_.skip_slice_guard) check_old_logp_slice(mini, m, samples);
    std::vector<double> adv_v;
    for (const auto* s : samples) adv_v.push_back(s->advantage);
    const torch::Tensor ones = torch::ones({b}, torch::kFloat64);
    const torch::Tensor idx = torch::arange(b, torch::kInt64);
    const torch::Tensor seq_tokens = torch::full({b}, static_cast<double>(train_timesteps_), torch::kFloat64);
    for (int64_t k = 0; k < train_timesteps_; ++k) {
      const Transition tr = transition(*flow_, samples, k);
      const torch::Tensor logp = tr.log_prob.to(torch::kCPU).to(torch::kFloat64);  // (B)
      torch::Tensor old;
      if (im.algo.old_logp == OldLogp::kRecompute)
        old = old_logp_[mini][m].select(1, k);
      else if (im.algo.old_logp == OldLogp::kReuse)
        old = logp.detach();
      else {
        std::vector<double> o;
        for (const auto* s : samples) o.push_back(s->log_probs[s->train_timesteps[k]].item<double>());
        old = torch::tensor(o, torch::kFloat64);
      }
      const torch::Tensor adv = torch::tensor(adv_v, torch::kFloat64);
      const PolicyLoss pl = policy_loss(logp, old, adv, ones, idx, po);
      torch::Tensor per_sample = pl.loss;  // (B)
      if (kl_on()) {
        const torch::Tensor ref = ref_mean_[mini][m][k];
        const torch::Tensor kl = ((tr.mean - ref).pow(2).flatten(1).mean(1) / (2 * tr.std_dev.pow(2)))
                                     .to(torch::kCPU)
                                     .to(torch::kFloat64);  // (B)
        per_sample = per_sample + im.algo.kl.coef * kl;
        kl_sum_ += kl.sum().item<double>();
      }
      const AggregatedLoss agg =
          aggregate_loss(per_sample, ones, idx, geometry_.loss_agg_mode, micros[m].denominators, seq_tokens);
      if (agg.loss.requires_grad()) (agg.loss * weight).backward();
      after_backward();
      loss_sum_ += agg.loss.item<double>();
      loss_finite_ = loss_finite_ && std::isfinite(agg.loss.item<double>());
      const PolicyStats st = policy_stats(pl, logp, old, ones);
      stats_.tokens += st.tokens, stats_.clipped += st.clipped, stats_.approx_kl_sum += st.approx_kl_sum;
      const double dev = (pl.ratio.detach() - 1).abs().max().item<double>();
      ratio_dev_ = std::max(ratio_dev_, dev);
      if (mini == 0 && k == 0) first_ratio_dev_ = std::max(first_ratio_dev_, dev);
    }
  }
  metrics["time/train_s"] += seconds_since(t0);
}

void ImageTrack::finish(MetricMap& metrics) {
  MetricReduction r;
  r.sum("loss", loss_sum_);
  r.sum("transitions", stats_.tokens);
  r.sum("clipped", stats_.clipped);
  r.sum("approx_kl", stats_.approx_kl_sum);
  r.sum("kl", kl_sum_);
  r.max("first_ratio_dev", first_ratio_dev_);
  r.max("ratio_dev", ratio_dev_);
  r.reduce(*comms_.dp);
  metrics["loss"] = r["loss"] / static_cast<double>(schedule_.minis.size());
  metrics["pg/clipfrac"] = r.ratio("clipped", "transitions");
  metrics["pg/approx_kl"] = r.ratio("approx_kl", "transitions");
  if (kl_on()) metrics["kl"] = r.ratio("kl", "transitions");
  metrics["pg/first_ratio_max_dev"] = r["first_ratio_dev"];
  metrics["pg/ratio_max_dev"] = r["ratio_dev"];
  metrics["train/transitions"] = r["transitions"];
}

double ImageTrack::write_sample_grid(const std::string& path) {
  const ImageTrackConfig& im = config_.tracks.image;
  std::vector<int64_t> labels;
  std::vector<models::NoiseKey> keys;
  for (int64_t row = 0; row < 4; ++row)
    for (int64_t c = 0; c < im.model.num_classes; ++c) {
      labels.push_back(c);
      keys.push_back({static_cast<uint64_t>(config_.run.seed), -1, c, row});  // fixed across the run
    }
  models::OdeSamplerOptions o{im.sampler.eval_steps, im.sampler.shift, im.sampler.cfg};
  torch::NoGradGuard no_grad;
  const torch::Tensor images =  // (4K, C, H, W)
      models::sample_ode(*flow_, torch::tensor(labels, torch::kInt64).to(device_), keys, o)
          .to(torch::kCPU)
          .to(torch::kFloat32);
  fs::create_directories(fs::path(path).parent_path());
  write_png_grid(path, images, im.model.num_classes);
  // What each cell was asked to draw and what the shape classifier sees in it.
  const std::vector<int64_t> seen =
      rewards::ShapeClassifier(im.model.image_size, im.model.num_classes).classify(images);
  nlohmann::json cells = nlohmann::json::array();
  int64_t right = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    right += seen[i] == labels[i] ? 1 : 0;
    cells.push_back({{"row", static_cast<int64_t>(i) / im.model.num_classes},
                     {"column", static_cast<int64_t>(i) % im.model.num_classes},
                     {"prompt", shared() ? class_prompt_text(labels[i]) : "class " + std::to_string(labels[i])},
                     {"class", tasks::shape_name(labels[i])},
                     {"classified_as", tasks::shape_name(seen[i])}});
  }
  const double accuracy = static_cast<double>(right) / static_cast<double>(labels.size());
  const std::string json_path = fs::path(path).replace_extension(".json").string();
  write_file_checked(json_path, nlohmann::json{{"image", fs::path(path).filename().string()},
                                               {"columns", im.model.num_classes},
                                               {"shape_class_accuracy", accuracy},
                                               {"cells", cells}}
                                        .dump(2) +
                                    "\n");
  return accuracy;
}

MetricMap ImageTrack::evaluate(const std::string& run_dir, int64_t completed) {
  if (!config_.eval.enabled()) return {};
  const ImageTrackConfig& im = config_.tracks.image;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t rows = config_.eval.image.samples_per_class, classes = im.model.num_classes;
  // One row (an image of every class) per batch, row r to dp rank r % size: a row's batch is the
  // same at any dp, so are its images and rewards.
  torch::Tensor rewards = torch::zeros({rows, classes}, torch::kFloat64);  // (R, K)
  std::vector<torch::Tensor> mine;                                         // (K, C, H, W) each
  models::OdeSamplerOptions o{im.sampler.eval_steps, im.sampler.shift, im.sampler.cfg};
  torch::NoGradGuard no_grad;
  for (int64_t row = dp_rank_; row < rows; row += dp_size_) {
    std::vector<int64_t> labels, ids;
    std::vector<models::NoiseKey> keys;
    for (int64_t c = 0; c < classes; ++c) {
      labels.push_back(c), ids.push_back(row * classes + c);
      keys.push_back({static_cast<uint64_t>(config_.run.seed), -2, c, row});  // fixed across evaluations
    }
    const torch::Tensor images =  // (K, C, H, W)
        models::sample_ode(*flow_, torch::tensor(labels, torch::kInt64).to(device_), keys, o).to(torch::kCPU);
    const std::vector<double> r = score(images, labels, ids);
    for (int64_t c = 0; c < classes; ++c) rewards[row][c] = r[static_cast<size_t>(c)];
    mine.push_back(images.to(torch::kFloat32));
  }
  comms_.dp->all_reduce(rewards);
  // The grid: every rank's rows, back in row order (all_gather_v is rank-major).
  const torch::Tensor local = mine.empty()
                                  ? torch::zeros({0, im.model.channels, im.model.image_size, im.model.image_size})
                                  : torch::cat(mine);        // (r_local K, C, H, W)
  const torch::Tensor all = comms_.dp->all_gather_v(local);  // (R K, C, H, W)
  if (comms_.world->rank() == 0) {
    std::vector<torch::Tensor> ordered(static_cast<size_t>(rows));
    int64_t at = 0;
    for (int64_t r = 0; r < dp_size_; ++r)
      for (int64_t row = r; row < rows; row += dp_size_, at += classes) ordered[row] = all.narrow(0, at, classes);
    char name[48];
    std::snprintf(name, sizeof(name), "eval_step_%06lld.png", static_cast<long long>(completed));
    fs::create_directories(fs::path(run_dir) / "samples");
    write_png_grid((fs::path(run_dir) / "samples" / name).string(), torch::cat(ordered), classes);
  }
  MetricMap m;
  m["eval/reward_mean"] = rewards.mean().item<double>();
  m["eval/images"] = static_cast<double>(rows * classes);
  m["eval/time_s"] = seconds_since(t0);
  return m;
}

}  // namespace tandem
