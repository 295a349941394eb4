// `tandem pretrain-flow`: rectified-flow pretraining of the image policy alone (dp over ranks),
// writing weights, the loss curve and a sample grid to tracks.image.pretrain.path (default
// <run dir>/pretrain), where `tandem train` then picks the weights up.
#include <spdlog/spdlog.h>

#include <iostream>

#include "apps/commands.h"
#include "common/error.h"
#include "core/config/config.h"
#include "core/tracks/flow_pretrain.h"
#include "core/trainer/trainer.h"
#include "models/dit/sampler.h"
#include "parallel/communicator.h"
#include "parallel/process_groups.h"
#include "parallel/runtime.h"

namespace tandem::app {

int run_pretrain_flow(const TrainArgs& args, int argc, char** argv) {
  parallel::MpiRuntime mpi(&argc, &argv);
  try {
    Config config = load_config(args.config_path, args.overrides);
    if (!config.tracks.image.enabled) throw UserError("tracks.image.enabled: pretrain-flow needs the image track");
    if (config.tracks.image.pretrain.steps < 1) throw UserError("tracks.image.pretrain.steps: set it >= 1 to pretrain");
    validate(config, mpi.size());
    if (config.tracks.image.model.arch == ImageArch::kShared)
      throw UserError(
          "tracks.image.model.arch: shared: the shared model pretrains both heads together (flow matching "
          "interleaved with tracks.ar.warmstart) at the start of `tandem train`; pretrain-flow trains a "
          "separate DiT (arch: dit)");
    const auto dims =
        parallel::ParallelDims::resolve(config.parallel.dp, config.parallel.cp, config.parallel.tp, mpi.size());
    parallel::ProcessGroups groups(MPI_COMM_WORLD, dims);
    auto world = parallel::make_mpi_communicator(groups, parallel::Axis::kWorld, config.parallel.timeout_s);
    torch::set_num_threads(1);
    if (mpi.rank() != 0) spdlog::set_level(spdlog::level::warn);  // one progress log, from rank 0
    const ImageModelConfig& m = config.tracks.image.model;
    models::DitConfig dc{m.image_size, m.channels,  m.patch_size, m.hidden_size,
                         m.num_layers, m.num_heads, m.num_classes};
    torch::manual_seed(static_cast<uint64_t>(config.run.seed) + 17);  // as the image track initialises it
    models::DitFlow model(models::Dit{dc});
    const std::string out = config.tracks.image.pretrain.path.value_or(run_directory(config) + "/pretrain");
    // Every rank is a data-parallel replica here, whatever the training layout.
    const FlowPretrainSummary s = pretrain_flow(model, {}, config, *world, *world, out);
    if (mpi.rank() == 0)
      std::cout << "pretrain-flow: velocity MSE " << s.first_loss << " -> " << s.final_loss
                << " (mean of the last 10%); "
                << "weights in " << out << "/model.safetensors\n";
    return 0;
  } catch (const UserError& e) {
    std::cerr << "tandem: error: " << e.what() << "\n";
    if (mpi.size() > 1) parallel::MpiRuntime::abort_job(2);
    return 2;
  }
}

}  // namespace tandem::app
