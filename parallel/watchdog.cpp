// One background thread checks the armed deadline every 50 ms. Exiting with std::_Exit (not
// MPI_Abort) is deliberate: it is async-signal-safe with respect to MPI's internal locks, which a
// hung collective may hold, and mpirun / srun kill the remaining ranks when one exits non-zero.
#include "parallel/watchdog.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace tandem::parallel {

namespace {

class Watchdog {
 public:
  static Watchdog& instance() {
    static Watchdog* w = new Watchdog();  // leaked on purpose: must outlive static destructors
    return *w;
  }
  void arm(const std::string& what, double timeout_s) {
    std::lock_guard<std::mutex> lock(mu_);
    what_ = what;
    timeout_s_ = timeout_s;
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    deadline_ns_ =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now).count() + static_cast<int64_t>(timeout_s * 1e9);
  }
  void disarm() { deadline_ns_ = 0; }

 private:
  Watchdog() {
    std::thread([this] { loop(); }).detach();
  }
  void loop() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const int64_t deadline = deadline_ns_.load();
      if (deadline == 0) continue;
      const auto now =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
              .count();
      if (now < deadline) continue;
      std::string what;
      double timeout = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        what = what_;
        timeout = timeout_s_;
      }
      std::fprintf(stderr,
                   "tandem: error: collective '%s' did not complete within parallel.timeout_s=%.1f s on pid %d "
                   "(a peer rank died or hangs); exiting so the launcher stops the job\n",
                   what.c_str(), timeout, static_cast<int>(getpid()));
      std::fflush(stderr);
      std::_Exit(kTimeoutExitCode);
    }
  }
  std::mutex mu_;
  std::string what_;
  double timeout_s_ = 0;
  std::atomic<int64_t> deadline_ns_{0};
};

}  // namespace

WatchdogScope::WatchdogScope(const std::string& what, double timeout_s) { Watchdog::instance().arm(what, timeout_s); }
WatchdogScope::~WatchdogScope() { Watchdog::instance().disarm(); }

}  // namespace tandem::parallel
