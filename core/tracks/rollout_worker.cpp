// The rollout rank's loop (see rollout_bridge.h for the order of the crossings).
#include "core/tracks/rollout_worker.h"

#include "core/run/fault_injection.h"

#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "core/batch/rollout_bridge.h"
#include "core/run/rank_runtime.h"
#include "core/run/stop_signal.h"
#include "core/tracks/ar_track.h"

namespace tandem {

void run_rollout_rank(const Config& config, const RolloutComms& comms, int64_t local_rank, int64_t local_ranks) {
  // SLURM and mpirun deliver a stop signal to every rank. The default action would end this one at
  // once, and the job with it before the train ranks checkpoint: caught, it changes nothing here
  // (the train ranks stop after their step and end the job with kExitPreempted).
  install_stop_handlers();
  spdlog::set_level(spdlog::level::warn);
  const RankRuntime rt = setup_rank_runtime(config.run, local_rank, local_ranks);
  // Its own dp group is the rollout ranks: they shard each step's prompts as dp ranks would.
  TrainerComms tc;
  tc.world = tc.dp = tc.dp_cp = tc.grad = comms.group;
  tc.cp = tc.tp = tc.model_tp = tc.model_cp = comms.self;
  ArTrack track(config, tc, rt.device, rt.dtype, /*rollout_only=*/true);
  if (comms.group->rank() == 0)
    std::fprintf(stderr, "tandem: rollout rank %lld of %lld (bridge rank %lld) | %d intra-op threads (%s)\n",
                 static_cast<long long>(comms.group->rank()), static_cast<long long>(comms.group->size()),
                 static_cast<long long>(comms.bridge->rank()), torch::get_num_threads(),
                 config.run.threads > 0 ? "run.threads" : "auto");

  const nlohmann::json start = nlohmann::json::parse(bridge_string(*comms.bridge, ""));
  const int64_t start_step = start.at("start_step").get<int64_t>();
  track.restore({{"data_cursor", start.at("data_cursor")}});
  int64_t version = 0;
  const std::vector<torch::Tensor> base = track.start_only_parameters();  // a LoRA base no file holds
  if (!base.empty()) bridge_weights(*comms.bridge, base, version, /*apply=*/true);
  bridge_weights(*comms.bridge, track.parameters(), version, /*apply=*/true);
  track.set_policy_version(version);
  const StalenessProtocol protocol{start_step, config.run.steps, config.tracks.ar.rollout.max_staleness};
  for (int64_t s = start_step; s < config.run.steps; ++s) {
    if (comms.group->rank() == 0) fault::maybe_kill("rollout", s, "rollout rank 0");
    if (protocol.receive_before_generate(s)) {
      bridge_weights(*comms.bridge, track.parameters(), version, /*apply=*/true);
      track.set_policy_version(version);
    }
    MetricMap unused;
    bridge_samples(*comms.bridge, track.rollout(s, unused));
  }
}

}  // namespace tandem
