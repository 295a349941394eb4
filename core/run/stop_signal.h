// Preemption: SIGTERM and SIGUSR1 (what SLURM sends before a time limit or a preemption, and what
// Open MPI's mpirun forwards to its ranks for SIGUSR1) ask the run to stop after the step in
// flight, with a checkpoint, and to exit with kExitPreempted. A second signal ends the process at
// once (exit 128 + signal): checkpoints are written under a staging name and committed by rename,
// so the last committed one stays intact.
#pragma once

namespace tandem {

namespace parallel {
class Communicator;
}  // namespace parallel

inline constexpr int kExitPreempted = 3;

// Installs the handlers (once per process; later calls do nothing).
void install_stop_handlers();
// The signal that asked this process to stop, or 0.
int stop_signal();
// The largest stop_signal() over the ranks of `comm` (a collective: every rank calls it at the same
// point, so they all agree to stop after the same step, whenever the signal reached each).
int stop_signal_on_any(parallel::Communicator& comm);

}  // namespace tandem
