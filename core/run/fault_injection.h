// Faults the end-to-end tests inject, armed by environment variables that real runs never set.
//   TANDEM_TEST_KILL=<where>:<step>        SIGKILL the calling rank at that point: after_step and
//                                          in_checkpoint (trainer rank 0: files staged, not
//                                          committed), rollout (the first rollout rank, before it
//                                          generates <step>)
//   TANDEM_TEST_NAN_LOSS=<rank>:<step>     the AR loss that rank reports for <step> reads NaN while
//                                          its gradients stay finite: only the loss check can skip it
//   TANDEM_TEST_FAIL=startup:<rank>        that rank alone fails its start-up checks (a rank-local error)
//   TANDEM_TEST_SIGNAL=<phase>:<step>      every rank sends itself SIGTERM in that phase of step index
//                                          <step>: rollout (before sampling) or optimizer (before the
//                                          first update), as SLURM would mid-step; warmstart (before
//                                          that warm-start step)
// One header, so every injection point is findable in one place.
#pragma once

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tandem::fault {

// True when `var` is set to "<where>:<step>" with these values (a malformed value never matches).
inline bool armed(const char* var, const std::string& where, int64_t step) {
  const char* spec = std::getenv(var);
  if (!spec) return false;
  const std::string s(spec);
  const auto colon = s.find(':');
  if (colon == std::string::npos || s.substr(0, colon) != where) return false;
  char* end = nullptr;
  const long long at = std::strtoll(s.c_str() + colon + 1, &end, 10);
  return end != s.c_str() + colon + 1 && *end == '\0' && at == step;
}

// TANDEM_TEST_KILL: SIGKILL this process when armed for (where, step).
inline void maybe_kill(const std::string& where, int64_t step, const char* who) {
  if (!armed("TANDEM_TEST_KILL", where, step)) return;
  std::fprintf(stderr, "tandem: TANDEM_TEST_KILL=%s:%lld: killing %s\n", where.c_str(), static_cast<long long>(step),
               who);
  std::fflush(nullptr);
  std::raise(SIGKILL);
}

// TANDEM_TEST_SIGNAL: SIGTERM to this process when armed for (phase, step).
inline void maybe_signal(const std::string& phase, int64_t step) {
  if (armed("TANDEM_TEST_SIGNAL", phase, step)) std::raise(SIGTERM);
}

// TANDEM_TEST_NAN_LOSS for world rank `rank` at `step`.
inline bool nan_loss(int64_t rank, int64_t step) { return armed("TANDEM_TEST_NAN_LOSS", std::to_string(rank), step); }

}  // namespace tandem::fault
