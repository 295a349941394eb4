// A process-wide watchdog for collectives: armed around each blocking call with a deadline; if
// the deadline passes it prints what hung and exits the process non-zero, so the launcher
// (mpirun / srun) tears the job down instead of letting it hang.
#pragma once

#include <string>

namespace tandem::parallel {

class WatchdogScope {
 public:
  WatchdogScope(const std::string& what, double timeout_s);  // arms
  ~WatchdogScope();                                          // disarms
  WatchdogScope(const WatchdogScope&) = delete;
  WatchdogScope& operator=(const WatchdogScope&) = delete;
};

// Exit code used when a collective times out.
constexpr int kTimeoutExitCode = 124;

}  // namespace tandem::parallel
