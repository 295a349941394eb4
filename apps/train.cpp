// `tandem train`: MPI start-up, the validated layout, process groups and communicators, then
// the Trainer. Any rank's failure ends the whole job (bad input: exit 2).
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <thread>

#include "apps/commands.h"
#include "common/error.h"
#include "core/config/config.h"
#include "core/run/fault_injection.h"
#include "core/tracks/rollout_worker.h"
#include "core/trainer/preflight.h"
#include "core/trainer/trainer.h"
#include "parallel/communicator.h"
#include "parallel/process_groups.h"
#include "parallel/runtime.h"

namespace tandem::app {

namespace {

// The recipe on every rank, what it names opened on rank 0 (preflight.h). An error every rank
// would hit the same way is printed once, by the lowest rank that hit it, and every rank returns
// 2 through a clean MPI finalize.
std::optional<Config> load_checked(const TrainArgs& args, const parallel::MpiRuntime& mpi, int& exit_code) {
  std::optional<Config> config;
  std::string error;
  int code = 0;
  try {
    if (fault::armed("TANDEM_TEST_FAIL", "startup", mpi.rank()))
      throw UserError("start-up failure injected on this rank (TANDEM_TEST_FAIL)");
    config = load_config(args.config_path, args.overrides);
    validate(*config, mpi.size());
    if (mpi.rank() == 0) preflight(*config);
  } catch (const UserError& e) {
    error = e.what(), code = 2;
  } catch (const std::exception& e) {
    error = e.what(), code = 1;
  }
  const int reporter = mpi.size() > 1 ? parallel::MpiRuntime::first_failed_rank(code != 0) : (code ? 0 : -1);
  if (reporter < 0) return config;
  if (mpi.rank() == reporter) {
    const std::string who = reporter == 0 ? "" : " (rank " + std::to_string(reporter) + ")";
    std::cerr << "tandem: " << (code == 1 ? "internal error" : "error") << who << ": " << error << "\n";
  }
  exit_code = code != 0 ? code : 2;  // ranks that were fine leave with the reporter's verdict
  return std::nullopt;
}

}  // namespace

int run_train(const TrainArgs& args, int argc, char** argv) {
  parallel::MpiRuntime mpi(&argc, &argv);
  int startup_code = 0;
  std::optional<Config> checked = load_checked(args, mpi, startup_code);
  if (!checked) return startup_code;
  try {
    Config config = std::move(*checked);
    const double timeout = config.parallel.timeout_s;
    // parallel.rollout_ranks: the last ranks of the world only generate; the rest train, laid out
    // as {dp, cp, tp} over their own communicator. The bridge (the whole world) joins the two.
    const int64_t rollout_ranks = config.parallel.rollout_ranks;
    const bool is_rollout = mpi.rank() >= mpi.size() - rollout_ranks;
    MPI_Comm role = MPI_COMM_WORLD;
    std::unique_ptr<parallel::Communicator> bridge;
    if (rollout_ranks > 0) {
      MPI_Comm_split(MPI_COMM_WORLD, is_rollout ? 1 : 0, mpi.rank(), &role);
      bridge = parallel::make_mpi_communicator(MPI_COMM_WORLD, "bridge", timeout);
    }
    if (is_rollout) {
      auto group = parallel::make_mpi_communicator(role, "rollout", timeout);
      auto self = parallel::make_mpi_communicator(MPI_COMM_SELF, "self", timeout);
      run_rollout_rank(config, RolloutComms{bridge.get(), group.get(), self.get()}, mpi.local_rank(), mpi.local_size());
      return 0;
    }
    const auto dims = parallel::ParallelDims::resolve(config.parallel.dp, config.parallel.cp, config.parallel.tp,
                                                      mpi.size() - rollout_ranks);
    parallel::ProcessGroups groups(role, dims);
    using parallel::Axis;
    auto world = parallel::make_mpi_communicator(groups, Axis::kWorld, timeout);
    auto dp = parallel::make_mpi_communicator(groups, Axis::kDp, timeout);
    auto cp = parallel::make_mpi_communicator(groups, Axis::kCp, timeout);
    auto tp = parallel::make_mpi_communicator(groups, Axis::kTp, timeout);
    auto dp_cp = parallel::make_mpi_communicator(groups, Axis::kDpCp, timeout);
    TrainerComms comms{world.get(), dp.get(), cp.get(),    tp.get(),    dp_cp.get(),
                       tp.get(),    cp.get(), dp_cp.get(), bridge.get()};
    // On CUDA with NCCL available (backend auto|nccl), model tensors move over NCCL.
    std::unique_ptr<parallel::Communicator> nccl_tp, nccl_cp, nccl_grad;
    const bool cuda =
        config.run.device == Device::kCuda || (config.run.device == Device::kAuto && torch::cuda::is_available());
    if (config.parallel.backend == Backend::kNccl && !cuda)
      throw UserError("parallel.backend: nccl needs run.device cuda (or auto with a visible GPU)");
    if (cuda && config.parallel.backend != Backend::kMpi && parallel::nccl_available()) {
      // NCCL refuses two ranks on one GPU with "Duplicate GPU detected": say what to do instead.
      const int64_t gpus = std::max<int64_t>(1, torch::cuda::device_count());
      if (mpi.local_size() > gpus)
        throw UserError(std::to_string(mpi.local_size()) + " ranks run on this node and it has " +
                        std::to_string(gpus) + " GPU(s): NCCL needs one GPU per rank; start at most " +
                        std::to_string(gpus) + " ranks per node, or set parallel.backend: mpi");
      const int device = static_cast<int>(mpi.local_rank() % gpus);
      nccl_tp = parallel::make_nccl_communicator(groups, Axis::kTp, timeout, device);
      nccl_cp = parallel::make_nccl_communicator(groups, Axis::kCp, timeout, device);
      nccl_grad = parallel::make_nccl_communicator(groups, Axis::kDpCp, timeout, device);
      comms.model_tp = nccl_tp.get(), comms.model_cp = nccl_cp.get(), comms.grad = nccl_grad.get();
    } else if (config.parallel.backend == Backend::kNccl) {
      throw UserError("parallel.backend: nccl requested but this tandem was built without NCCL");
    }
    TrainOptions options;
    options.resume = args.resume;
    options.local_rank = mpi.local_rank();
    options.local_ranks = mpi.local_size();
    const int code = Trainer(std::move(config), dims, comms, options).run();
    // Rollout ranks wait on the bridge for a next step that will not come: end them with the code.
    if (code != 0 && rollout_ranks > 0) parallel::MpiRuntime::abort_job(code);
    return code;
  } catch (const UserError& e) {
    // After start-up every rank may hit the same error (a damaged checkpoint) at the same moment:
    // rank 0 reports and ends the job; the others wait a moment first, so that the job ends before
    // they print the same line, and still end it themselves when the error is theirs alone.
    if (mpi.rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::cerr << "tandem: error" << (mpi.size() > 1 ? " (rank " + std::to_string(mpi.rank()) + ")" : "") << ": "
              << e.what() << "\n";
    if (mpi.size() > 1) parallel::MpiRuntime::abort_job(2);
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tandem: internal error (rank " << mpi.rank() << "): " << e.what() << "\n";
    if (mpi.size() > 1) parallel::MpiRuntime::abort_job(1);
    return 1;
  }
}

}  // namespace tandem::app
