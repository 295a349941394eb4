// See stop_signal.h. The handler only stores the signal (async-signal-safe); the trainer polls it
// between steps and agrees over ranks, since a signal may reach the ranks at different moments.
#include "core/run/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <mutex>

namespace tandem {

namespace {

volatile sig_atomic_t g_signal = 0;

void on_stop(int sig) {
  if (g_signal != 0) _exit(128 + sig);  // the second one: now
  g_signal = sig;
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

}  // namespace tandem
