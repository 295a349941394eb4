// The loop: every enabled track prepares its step, then each mini-batch accumulates every
// track's weighted loss and takes one optimizer update over all parameters. Rank 0 owns the
// run directory's files; checkpoints are collective (model shards gathered over tp).
#include "core/trainer/trainer.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/regular_file.h"
#include "common/write_file.h"
#include "core/batch/rollout_bridge.h"
#include "core/grpo/adamw_8bit.h"
#include "core/grpo/adamw_rate.h"
#include "core/grpo/adamw_state.h"
#include "core/grpo/lr_schedule.h"
#include "core/grpo/master_weights.h"
#include "core/grpo/policy_update.h"
#include "core/run/checkpoint.h"
#include "core/run/checkpoint_manifest.h"
#include "core/run/fault_injection.h"
#include "core/run/rank_runtime.h"
#include "core/run/stop_signal.h"
#include "core/tracks/ar_track.h"
#include "core/tracks/image_track.h"
#include "core/trainer/resume_check.h"
#include "runtime/blas_kernel.h"
#include "runtime/cpu_threads.h"
#include "runtime/device_stats.h"
#include "runtime/host_memory.h"
#include "runtime/host_pool.h"

namespace fs = std::filesystem;

namespace tandem {

std::string run_directory(const Config& c) { return c.run.out_dir + "/" + c.run.name; }

namespace {
std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}
}  // namespace

std::string recipe_hash(const std::string& recipe_yaml) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(xxh64(recipe_yaml.data(), recipe_yaml.size())));
  return hex;
}

struct Trainer::Impl {
  Config config;
  parallel::ParallelDims dims;
  TrainerComms comms;
  TrainOptions options;
  std::string run_dir;
  torch::Device device{torch::kCPU};
  torch::Dtype dtype = torch::kFloat32;
  bool master_weights = false;  // run.dtype bfloat16: float32 master weights (master_weights.h)
  std::vector<std::unique_ptr<Track>> tracks;
  std::unique_ptr<MasterWeights> master;               // set with master_weights
  std::unique_ptr<torch::optim::Optimizer> optimizer;  // AdamW, or AdamW8bit (optim.moments: 8bit)
  parallel::TpShards shards;  // which trained parameters are split over tp (the clipping norm's)
  std::unique_ptr<MetricsWriter> metrics;
  int64_t start_step = 0;
  bool rank0 = false;

  Impl(Config c, const parallel::ParallelDims& d, TrainerComms cm, TrainOptions o)
      : config(std::move(c)), dims(d), comms(cm), options(std::move(o)) {}

  void setup_logging() {
    auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    std::vector<spdlog::sink_ptr> sinks{console};
    if (rank0) sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(run_dir + "/train.log"));
    auto logger = std::make_shared<spdlog::logger>("tandem", sinks.begin(), sinks.end());
    logger->set_level(rank0 ? spdlog::level::info : spdlog::level::warn);
    logger->set_pattern("[%H:%M:%S] %v");
    spdlog::set_default_logger(logger);
  }

  void setup_run_dir() {
    const bool resuming = !options.resume.empty();
    if (rank0) {
      CheckpointDir ckpts(run_dir, config.run.keep_last);
      if (!resuming && !ckpts.committed_steps().empty())
        throw UserError("run directory " + run_dir +
                        " already holds checkpoints; pass --resume auto to continue it "
                        "or set run.name to start a new run");
      // The file system has the last word (/proc, a read-only mount, a quota): named, not internal.
      std::error_code ec;
      fs::create_directories(run_dir, ec);
      if (ec || !fs::is_directory(run_dir))
        throw UserError("run.out_dir: cannot create the run directory " + run_dir + ": " +
                        (ec ? ec.message() : std::string("not a directory")) +
                        "; set run.out_dir to a directory you can write");
      try {
        write_file_checked(run_dir + "/recipe.yaml", to_yaml(config));
      } catch (const UserError& e) {
        throw UserError(std::string("run.out_dir: ") + e.what() + "; set run.out_dir to a directory you can write");
      }
    }
    comms.world->barrier();
  }

  // This rank's peak host RSS, peak device memory (0 on the CPU) and the host pool's peak mapped
  // bytes (0 without it) so far, in GiB: (3) float64.
  torch::Tensor peak_memory_gib() const {
    const HostPool* pool = installed_host_pool();
    const double pooled = pool != nullptr ? static_cast<double>(pool->stats().peak_mapped_bytes) : 0.0;
    return torch::tensor(
               {static_cast<double>(peak_rss_bytes()), static_cast<double>(device_peak_bytes(device)), pooled},
               torch::kFloat64) /
           static_cast<double>(1 << 30);
  }

  void setup_device() {
    const RankRuntime rt = setup_rank_runtime(config.run, options.local_rank, options.local_ranks);
    device = rt.device, dtype = rt.dtype, master_weights = rt.master_weights;
    const CpuBudget& cpus = rt.cpus;
    // Layer recompute is memory over speed, so host memory a step frees goes back to the system.
    if (config.train.recompute == Recompute::kLayers) return_freed_host_memory("train.recompute: layers");
    spdlog::info(
        "tandem: {} | device {} | dtype {}{} | {} local ranks on {} | {} intra-op threads per rank ({}) | {} "
        "(GEMM {:.0f} GFLOP/s, float32 512^2 on these threads) | {}",
        dims.to_string(), device.str(), to_string(config.run.dtype),
        master_weights ? " (bf16 compute, float32 master weights, AdamW state and gradient reduction)" : "",
        options.local_ranks, describe(cpus), torch::get_num_threads(), config.run.threads > 0 ? "run.threads" : "auto",
        blas_description(), device.is_cpu() ? gemm_gflops(512, 3) : 0.0, host_memory_description());
    if (config.train.overlap) {
      const int n = torch::get_num_threads();
      spdlog::info(
          "train.overlap: while sampling, the sampler and the old/ref log-prob forward each run on {} "
          "intra-op thread{} (training's count, so the log-probs are training's to the bit); {} threads on "
          "this rank's {} core{}",
          n, n == 1 ? "" : "s", 2 * n, n, n == 1 ? "" : "s");
    }
  }

  void build_tracks() {
    ArTrack* ar = nullptr;
    if (config.tracks.ar.enabled) {
      auto t = std::make_unique<ArTrack>(config, comms, device, dtype);
      ar = t.get();
      tracks.push_back(std::move(t));
    }
    if (config.tracks.image.enabled) {
      const bool shared = config.tracks.image.model.arch == ImageArch::kShared;  // validate() checked the AR side
      tracks.push_back(std::make_unique<ImageTrack>(config, comms, device, dtype,
                                                    shared ? ar->unified_model() : models::UnifiedModel{nullptr},
                                                    shared ? &ar->tokenizer() : nullptr));
    }
    if (master_weights) {
      master = std::make_unique<MasterWeights>(all_parameters());
      for (auto& t : tracks) t->set_after_backward([this] { master->accumulate_grads(); });
    }
    const auto& o = config.optim;
    const auto adamw =
        torch::optim::AdamWOptions(o.lr).betas({o.betas[0], o.betas[1]}).eps(o.eps).weight_decay(o.weight_decay);
    const std::vector<torch::Tensor> trained = trained_parameters();
    if (o.moments == OptimMoments::k8bit) {
      int64_t numel = 0, quantized = 0, tensors = 0;
      for (const auto& p : trained) {
        numel += p.numel();
        if (!quantizes_moments(p)) continue;
        quantized += p.numel();
        ++tensors;
      }
      spdlog::info(
          "optim.moments: 8bit: AdamW's moments as blockwise 8-bit codes (torchao's AdamW8bit) for {} of {} "
          "trained tensors ({} of {} parameters), float32 for the rest: about {:.1f} MB of state on this rank",
          tensors, trained.size(), quantized, numel,
          (2.0 * quantized + 8.0 * quantized / kMomentBlock + 8.0 * (numel - quantized)) / 1e6);
      optimizer = std::make_unique<AdamW8bit>(trained, adamw);
    } else {
      optimizer = std::make_unique<torch::optim::AdamW>(trained, adamw);
    }
    shards = tp_shards();
  }

  // What the optimizer steps: the float32 master under mixed precision, else the model's own.
  std::vector<torch::Tensor> trained_parameters() { return master ? master->master() : all_parameters(); }

  // fn with the float32 master in the model under mixed precision (checkpoint I/O, phases with
  // their own optimizer), else fn as it is.
  void on_master(const std::function<void()>& fn) {
    if (master)
      master->with_master_in_model(fn);
    else
      fn();
  }

  // Every track's parameters, each tensor once: with a shared model both tracks name the same
  // weights, and their gradients add up in the same .grad before the one update.
  std::vector<torch::Tensor> all_parameters(std::vector<bool>* tp_sharded = nullptr) {
    std::vector<torch::Tensor> params;
    std::set<const void*> seen;
    for (auto& t : tracks) {
      const std::vector<torch::Tensor> ps = t->parameters();
      const std::vector<bool> sharded = tp_sharded ? t->tp_sharded() : std::vector<bool>(ps.size(), false);
      for (size_t i = 0; i < ps.size(); ++i)
        if (seen.insert(ps[i].unsafeGetTensorImpl()).second) {
          params.push_back(ps[i]);
          if (tp_sharded) tp_sharded->push_back(sharded.at(i));
        }
    }
    return params;
  }

  // Which trained parameters are split over tp (trained_parameters() order: the masters follow the
  // model's), so the clipping norm is the whole model's on every tp rank.
  parallel::TpShards tp_shards() {
    parallel::TpShards s{comms.model_tp, {}};
    all_parameters(&s.sharded);
    return s;
  }

  std::string optimizer_file(const std::string& dir) const {
    const auto c = dims.coord(comms.world->rank());
    return dir + "/optimizer_tp" + std::to_string(c.tp) + ".pt";
  }

  // Only rank 0 resolves --resume, because verifying a checkpoint reads all of it; the others take
  // its choice by broadcast, so every rank loads the same checkpoint.
  std::optional<std::string> choose_checkpoint() {
    if (options.resume.empty()) return std::nullopt;
    // (1): -1 a fresh start; else the step (auto) or 0 (the named directory)
    torch::Tensor pick = torch::full({1}, -1, torch::kInt64);
    std::optional<std::string> path;
    if (rank0) {
      CheckpointDir::Choice choice = CheckpointDir::resolve(run_dir, options.resume);
      for (const auto& w : choice.warnings) spdlog::warn("resume: {}", w);
      path = choice.path;
      if (path) pick[0] = options.resume == "auto" ? checkpoint_step(*path) : 0;
    }
    comms.world->broadcast(pick, 0);
    const int64_t picked = pick[0].item<int64_t>();
    if (!rank0 && picked >= 0)
      path = options.resume == "auto" ? CheckpointDir(run_dir, 0).root() + "/" + CheckpointDir::step_name(picked)
                                      : options.resume;
    return path;
  }

  static int64_t checkpoint_step(const std::string& path) {
    const std::string name = fs::path(path).filename().string();  // step_NNNNNN
    return std::stoll(name.substr(name.rfind('_') + 1));
  }

  // trainer_state.json of checkpoint `path`, every field checked: a checkpoint written by an older
  // build or damaged without a manifest to catch it is user input, refused with the file named.
  nlohmann::json read_trainer_state(const std::string& path) const {
    const std::string file = path + "/trainer_state.json";
    require_regular_file(file);
    std::ifstream in(file);
    const nlohmann::json state = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    auto bad = [&](const std::string& what) -> UserError {
      return UserError(file + ": " + what + "; the checkpoint is damaged (resume from another one)");
    };
    if (state.is_discarded() || !state.is_object()) throw bad("not a JSON object");
    if (!state.contains("completed_steps") || !state["completed_steps"].is_number_integer() ||
        state["completed_steps"].get<int64_t>() < 0)
      throw bad("completed_steps is missing or not a non-negative integer");
    if (!state.contains("tracks") || !state["tracks"].is_object()) throw bad("tracks is missing or not an object");
    if (state.contains("libtorch") && !state["libtorch"].is_string()) throw bad("libtorch is not a string");
    for (const auto& t : tracks)
      if (!state["tracks"].contains(t->name()) || !state["tracks"][t->name()].is_object())
        throw bad("tracks." + t->name() + " is missing or not an object (the run had other tracks enabled?)");
    return state;
  }

  void resume(const std::string& path) {
    const Config saved = load_saved_config(path + "/recipe.yaml");
    const std::string why = incompatible_change(saved, config);
    if (!why.empty()) throw UserError("--resume " + path + ": " + why + "; start a new run instead");
    const nlohmann::json state = read_trainer_state(path);
    // The hash the checkpoint recorded is of the recipe it saved beside it (XXH64, stable across
    // builds): a mismatch means recipe.yaml was edited or damaged after the save.
    if (state.contains("recipe_hash") && state["recipe_hash"].is_string() &&
        state["recipe_hash"].get<std::string>() != recipe_hash(read_text_file(path + "/recipe.yaml")))
      throw UserError(path +
                      "/recipe.yaml: does not match the recipe_hash in trainer_state.json (edited or "
                      "damaged after the checkpoint was written); resume from another checkpoint");
    if (to_yaml(saved) != to_yaml(config))
      spdlog::info("resume: the recipe differs from the checkpoint's in keys a checkpoint survives (steps, lr, ...)");
    on_master([&] {
      for (auto& t : tracks) t->load(path);
    });
    for (auto& t : tracks) {
      try {
        t->restore(state["tracks"][t->name()]);
      } catch (const std::exception& e) {  // JSON types, or a cursor this data cannot have
        throw UserError(path + "/trainer_state.json: tracks." + t->name() + ": " + e.what() +
                        "; the checkpoint is damaged or from other data (resume from another one)");
      }
    }
    const std::string opt = optimizer_file(path);
    require_regular_file(opt, "the optimizer state ");
    try {
      torch::load(*optimizer, opt);
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      // Checkpoints record the LibTorch that wrote them since the move to PyTorch 2.x ([18]); one
      // without that field came from the Debian LibTorch 1.13 build.
      if (!state.contains("libtorch"))
        throw UserError(opt + ": cannot be read as this run's AdamW state (" + what.substr(0, 200) +
                        "); the checkpoint records no LibTorch version, so it was written before tandem moved "
                        "to PyTorch 2.x's LibTorch (by the LibTorch 1.13 build) or is damaged: resume it with the "
                        "tandem that wrote it, or start a new run from its weights (tracks.ar.model.hf_dir: " +
                        path + "/ar_model)");
      throw UserError(opt + ": cannot be read as this run's AdamW state (" + what.substr(0, 200) +
                      "); the checkpoint is damaged or from another model (written by LibTorch " +
                      state["libtorch"].dump() + ")");
    }
    start_step = state["completed_steps"].get<int64_t>();
    spdlog::info("resume: {} at step {}", path, start_step);
  }

  void save_checkpoint(int64_t completed) {
    const auto t0 = std::chrono::steady_clock::now();
    CheckpointDir ckpts(run_dir, config.run.keep_last);
    if (rank0) ckpts.begin(completed);
    comms.world->barrier();
    const std::string dir = ckpts.staging_path(completed);
    on_master([&] {  // a checkpoint keeps the float32 master, so a resume continues exactly
      for (auto& t : tracks) t->save(dir);
    });
    const auto c = dims.coord(comms.world->rank());
    if (c.dp == 0 && c.cp == 0) torch::save(*optimizer, optimizer_file(dir));
    if (rank0) {
      nlohmann::json state;
      state["completed_steps"] = completed;
      state["recipe_hash"] = recipe_hash(to_yaml(config));
      state["libtorch"] = TORCH_VERSION;  // what wrote the AdamW state (torch::save's archive)
      for (auto& t : tracks) state["tracks"][t->name()] = t->state();
      write_file_checked(dir + "/trainer_state.json", state.dump(2) + "\n");
      write_file_checked(dir + "/recipe.yaml", to_yaml(config));
    }
    comms.world->barrier();
    if (rank0) fault::maybe_kill("in_checkpoint", completed, "rank 0");
    if (rank0) ckpts.commit(completed);
    comms.world->barrier();
    spdlog::info("checkpoint: step {} saved in {:.1f} s", completed,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }

  MetricMap step(int64_t step) {
    const auto t0 = std::chrono::steady_clock::now();
    const double lr =
        learning_rate(config.optim.lr, config.optim.schedule, config.optim.warmup_steps, config.run.steps, step);
    set_learning_rate(*optimizer, lr);
    allocate_optimizer_state(*optimizer);  // below this step's activations, not among them (adamw_state.h)
    std::vector<MetricMap> per_track(tracks.size());
    for (size_t i = 0; i < tracks.size(); ++i) tracks[i]->prepare(step, per_track[i]);
    const std::vector<torch::Tensor> params = trained_parameters();
    double grad_norm = 0, skipped = 0, update_s = 0;
    const int64_t minis = config.train.num_mini_batches;
    for (int64_t mini = 0; mini < minis; ++mini) {
      if (mini == 0) fault::maybe_signal("optimizer", step);
      bool loss_finite = true;
      for (size_t i = 0; i < tracks.size(); ++i) {
        tracks[i]->accumulate(mini, tracks.size() > 1 ? tracks[i]->weight() : 1.0, per_track[i]);
        loss_finite = loss_finite && tracks[i]->loss_finite();
      }
      const auto u0 = std::chrono::steady_clock::now();
      const StepOutcome out =
          reduce_and_step(params, *optimizer, *comms.grad, config.optim.grad_clip, loss_finite, shards);
      if (master && out.applied) master->copy_to_model();
      update_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - u0).count();
      grad_norm += out.grad_norm / static_cast<double>(minis);
      skipped += out.applied ? 0 : 1;
    }
    if (comms.bridge) {
      const StalenessProtocol protocol{start_step, config.run.steps, config.tracks.ar.rollout.max_staleness};
      if (protocol.publish_after_update(step))
        for (auto& t : tracks) t->publish_weights(step + 1);  // the AR track's; timed in its metrics
    }
    MetricMap m;
    for (size_t i = 0; i < tracks.size(); ++i) {
      tracks[i]->finish(per_track[i]);
      for (const auto& [k, v] : per_track[i]) m[tracks[i]->name() + "/" + k] = v;
    }
    m["lr"] = lr;
    m["grad_norm"] = grad_norm;
    torch::Tensor rss = peak_memory_gib();  // (3)
    comms.world->all_reduce(rss, parallel::ReduceOp::kMax);
    m["mem/peak_rss_gib"] = rss[0].item<double>();                        // the largest rank's high-water mark so far
    if (device.is_cuda()) m["mem/peak_gpu_gib"] = rss[1].item<double>();  // the caching allocator's
    if (installed_host_pool() != nullptr) m["mem/host_pool_peak_gib"] = rss[2].item<double>();  // the large tensors
    m["steps/skipped_updates"] = skipped;
    m["time/update_s"] = update_s;  // gradient reduction, clipping, the optimizer step and the master copy-back
    m["time/step_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return m;
  }

  void write_samples(int64_t completed) {
    for (auto& t : tracks) {
      const std::string line = t->write_samples(run_dir, completed);
      if (!line.empty()) spdlog::info("{}", line);
    }
  }

  // The step's own time (not a running mean), the tracks' figures, grad norm, lr, and the eval's
  // when one ran.
  void log_progress(int64_t completed, const MetricMap& m, double elapsed_s, int64_t steps_done) {
    auto get = [&](const std::string& k) {
      auto it = m.find(k);
      return it == m.end() ? 0.0 : it->second;
    };
    const double eta = steps_done > 0 ? elapsed_s / steps_done * static_cast<double>(config.run.steps - completed) : 0;
    std::string line = fmt::format("step {}/{} | {:.2f} s, eta {:.0f} s | grad norm {:.3g} lr {:.3g}", completed,
                                   config.run.steps, get("time/step_s"), eta, get("grad_norm"), get("lr"));
    for (auto& t : tracks) {
      const std::string n = t->name();
      line += fmt::format(" | {} reward {:.3f} loss {:+.4f} clip {:.3f}", n, get(n + "/reward/mean"), get(n + "/loss"),
                          get(n + "/pg/clipfrac"));
      if (m.count(n + "/entropy")) line += fmt::format(" entropy {:.3f}", get(n + "/entropy"));
      if (m.count(n + "/kl")) line += fmt::format(" kl {:.4f}", get(n + "/kl"));
      line += fmt::format(" gen {:.2f}s train {:.2f}s", get(n + "/time/generate_s"), get(n + "/time/train_s"));
      if (m.count(n + "/response/len_mean"))
        line +=
            fmt::format(" len {:.1f} tok/s {:.0f}", get(n + "/response/len_mean"), get(n + "/perf/train_tokens_per_s"));
    }
    spdlog::info("{}", line);
    log_eval(completed, m);
  }

  void log_eval(int64_t completed, const MetricMap& m) {
    std::string line;
    for (auto& t : tracks) {
      const std::string p = t->name() + "/eval/";
      if (!m.count(p + "reward_mean")) continue;
      line += fmt::format(" | {} reward {:.3f}", t->name(), m.at(p + "reward_mean"));
      if (m.count(p + "pass@1_greedy")) line += fmt::format(" pass@1 greedy {:.3f}", m.at(p + "pass@1_greedy"));
      for (int64_t k = 1; m.count(p + "pass@" + std::to_string(k)); k *= 2)  // 1, 2, 4, ...: the curve's shape
        line += fmt::format(" pass@{} {:.3f}", k, m.at(p + "pass@" + std::to_string(k)));
      line += fmt::format(" ({:.1f} s)", m.count(p + "time_s") ? m.at(p + "time_s") : 0.0);
    }
    if (!line.empty()) spdlog::info("eval after step {}{}", completed, line);
  }

  // The held-out evaluation of every track after `completed` steps, prefixed (collective).
  MetricMap evaluate(int64_t completed) {
    MetricMap out;
    for (auto& t : tracks)
      for (const auto& [k, v] : t->evaluate(run_dir, completed)) out[t->name() + "/" + k] = v;
    return out;
  }

  // samples/step_NNNNNN.jsonl: rank 0's first run.sample_groups groups of the step, as text.
  void write_sample_records(int64_t completed) {
    if (config.run.sample_groups == 0) return;
    std::string text;
    for (auto& t : tracks)
      for (nlohmann::json r : t->sample_records(config.run.sample_groups)) {
        r["track"] = t->name(), r["step"] = completed;
        text += r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      }
    if (text.empty()) return;
    fs::create_directories(run_dir + "/samples");
    write_file_checked(run_dir + "/samples/" + CheckpointDir::step_name(completed) + ".jsonl", text);
  }

  int run() {
    install_stop_handlers();
    rank0 = comms.world->rank() == 0;
    run_dir = run_directory(config);
    setup_run_dir();
    setup_logging();
    if (rank0) spdlog::info("resolved recipe (saved to {}/recipe.yaml):\n{}", run_dir, to_yaml(config));
    setup_device();
    build_tracks();
    // Pretrained image weights (or pretraining) come first: they are the KL reference and the
    // starting point a resume then overwrites.
    const std::optional<std::string> checkpoint = choose_checkpoint();
    if (!options.resume.empty() && !checkpoint) spdlog::info("resume: no checkpoint in {}; starting fresh", run_dir);
    // A track with supervised warm-start steps, which a shared model's pretraining interleaves.
    Track* text = nullptr;
    for (auto& t : tracks)
      if (t->warmstart_steps() > 0) text = t.get();
    bool warmed = false;  // the text warm-start ran inside pretraining
    // Phases with their own optimizer train the float32 master under mixed precision.
    on_master([&] {
      for (auto& t : tracks) warmed = t->pretrain(!checkpoint, text) || warmed;
    });
    if (checkpoint) resume(*checkpoint);
    if (start_step == 0 && !warmed) {
      on_master([&] {
        for (auto& t : tracks) t->warmstart();
      });
      // A signal during the warm-start ended it early (ArTrack::warmstart; every train rank alike).
      // It is not checkpointed: a resume would find no checkpoint and start again, which is what a
      // plain rerun does too. A signal in its last step stops the run after RL's first step instead.
      for (auto& t : tracks)
        if (const int stop = t->warmstart_stop_signal(); stop > 0) {
          if (rank0)
            spdlog::warn(
                "stopping during the supervised warm-start on signal {} ({}): no checkpoint is written (a "
                "warm-start does not resume part-way); the same command, or --resume auto, starts the run again",
                stop, strsignal(stop));
          return kExitPreempted;
        }
    }
    if (start_step == 0)  // the KL references are the policy RL starts from
      for (auto& t : tracks) t->refresh_reference();
    // Rollout ranks start from exactly these weights, step and data cursor (rollout_bridge.h).
    if (comms.bridge)
      for (auto& t : tracks) t->publish_start(start_step);
    if (rank0) metrics = std::make_unique<MetricsWriter>(run_dir, start_step);
    if (rank0 && start_step == 0) write_samples(0);  // what the policy draws before RL
    if (start_step == 0 && config.eval.at_start) {
      const MetricMap e = evaluate(0);
      if (rank0) metrics->write(0, e), log_eval(0, e);
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = start_step; s < config.run.steps; ++s) {
      MetricMap m = step(s);
      const int64_t completed = s + 1;
      if (config.eval.every > 0 && completed % config.eval.every == 0)
        for (const auto& [k, v] : evaluate(completed)) m[k] = v;
      const bool logged = completed % config.run.log_every == 0 || completed == config.run.steps;
      if (rank0) {
        metrics->write(completed, m);
        if (logged)
          log_progress(completed, m, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                       completed - start_step);
        if (logged) write_sample_records(completed);
      }
      if (rank0 && (completed % (config.run.log_every * 10) == 0 || completed == config.run.steps))
        write_samples(completed);
      const bool saved =
          (config.run.save_every > 0 && completed % config.run.save_every == 0) || completed == config.run.steps;
      if (saved) save_checkpoint(completed);
      if (rank0) fault::maybe_kill("after_step", completed, "rank 0");
      // A stop signal (SIGTERM / SIGUSR1) on any rank: every rank ends after this step, with a
      // checkpoint. One collective per step; the signal may reach the ranks at different moments.
      const int stop = stop_signal_on_any(*comms.world);
      if (stop > 0 && completed < config.run.steps) {
        if (!saved) save_checkpoint(completed);
        if (rank0)
          spdlog::warn("stopping after step {} on signal {} ({}): checkpoint {} written; continue with --resume auto",
                       completed, stop, strsignal(stop), CheckpointDir::step_name(completed));
        return kExitPreempted;
      }
    }
    torch::Tensor rss = peak_memory_gib();                             // (3)
    rss = comms.world->all_gather(rss).reshape({-1, 3}).contiguous();  // (world, 3)
    std::string per_rank, gpu_per_rank;
    for (int64_t r = 0; r < rss.size(0); ++r) {
      per_rank += fmt::format("{}{:.2f}", r ? " " : "", rss[r][0].item<double>());
      gpu_per_rank += fmt::format("{}{:.2f}", r ? " " : "", rss[r][1].item<double>());
    }
    spdlog::info("done: {} steps; metrics in {}/metrics.jsonl; peak RSS per rank (GiB): {}{}", config.run.steps,
                 run_dir, per_rank, device.is_cuda() ? "; peak GPU memory per rank (GiB): " + gpu_per_rank : "");
    if (const HostPool* pool = installed_host_pool()) {
      const HostPoolStats s = pool->stats();
      spdlog::info(
          "host pool (rank {}): peak {:.2f} GiB mapped for {:.2f} GiB live; {:.2f} GiB mapped new, {:.2f} GiB "
          "of freed pages moved in {} calls ({} failed), {} boundaries",
          comms.world->rank(), s.peak_mapped_bytes / 1073741824.0, s.peak_live_bytes / 1073741824.0,
          s.fresh_bytes / 1073741824.0, s.moved_bytes / 1073741824.0, s.moves, s.failed_moves, s.pieces);
    }
    return 0;
  }
};

Trainer::Trainer(Config config, const parallel::ParallelDims& dims, TrainerComms comms, TrainOptions options)
    : impl_(std::make_unique<Impl>(std::move(config), dims, comms, std::move(options))) {}
Trainer::~Trainer() = default;
int Trainer::run() { return impl_->run(); }

}  // namespace tandem
