// See stop_signal.h. The handler only stores the signal and writes a fixed line
// (async-signal-safe); the trainer polls it between steps and agrees over ranks, since a signal
// may reach the ranks at different moments.
#include "core/run/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <mutex>

#include "parallel/communicator.h"

namespace tandem {

namespace {

volatile sig_atomic_t g_signal = 0;

void say(const char* text) {
  size_t n = 0;
  while (text[n] != '\0') ++n;
  const ssize_t ignored = write(STDERR_FILENO, text, n);  // nothing to do if stderr is gone
  (void)ignored;
}

void on_stop(int sig) {
  if (g_signal != 0) _exit(128 + sig);  // the second one: now
  g_signal = sig;
  // Seen at once, so a user (or a test) knows a second signal now ends the process.
  say(sig == SIGTERM ? "tandem: SIGTERM received: stopping after this step (a second signal exits at once)\n"
                     : "tandem: SIGUSR1 received: stopping after this step (a second signal exits at once)\n");
}

}  // namespace

void install_stop_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // a blocking call in flight goes on; the step finishes normally
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGUSR1, &sa, nullptr);
  });
}

int stop_signal() { return g_signal; }

int stop_signal_on_any(parallel::Communicator& comm) {
  torch::Tensor stop = torch::tensor({static_cast<double>(stop_signal())}, torch::kFloat64);  // (1)
  comm.all_reduce(stop, parallel::ReduceOp::kMax);
  return static_cast<int>(stop.item<double>());
}

}  // namespace tandem
