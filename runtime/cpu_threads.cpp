// Linux specifics: sched_getaffinity for the mask, /sys/fs/cgroup/cpu.max (cgroup v2) or
// cpu.cfs_quota_us / cpu.cfs_period_us (v1) for the quota.
#include "runtime/cpu_threads.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <thread>

namespace tandem {

namespace {

int64_t cgroup_quota() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string quota;
  double period = 0;
  if (v2 >> quota >> period) {
    if (quota == "max" || period <= 0) return 0;
    return static_cast<int64_t>(std::ceil(std::stod(quota) / period));
  }
  std::ifstream q1("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p1("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  double q = -1, p = 0;
  if (q1 >> q && p1 >> p && q > 0 && p > 0) return static_cast<int64_t>(std::ceil(q / p));
  return 0;
}

}  // namespace

CpuBudget cpu_budget() {
  CpuBudget c;
  c.hardware = std::max<int64_t>(1, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  c.affinity = sched_getaffinity(0, sizeof(set), &set) == 0 ? std::max(1, CPU_COUNT(&set)) : c.hardware;
  c.quota = cgroup_quota();
  return c;
}

int64_t intra_op_threads(const CpuBudget& c, int64_t local_ranks) {
  const int64_t usable = c.quota > 0 ? std::min(c.affinity, c.quota) : c.affinity;
  const bool bound = c.affinity < c.hardware;
  const int64_t threads = bound ? usable : usable / std::max<int64_t>(1, local_ranks);
  return std::max<int64_t>(1, threads);
}

std::string describe(const CpuBudget& c) {
  const int64_t usable = c.quota > 0 ? std::min(c.affinity, c.quota) : c.affinity;
  return std::to_string(usable) + " CPUs (affinity " + std::to_string(c.affinity) + " of " +
         std::to_string(c.hardware) + ", " +
         (c.quota > 0 ? "cgroup quota " + std::to_string(c.quota) : "no cgroup quota") + ")";
}

}  // namespace tandem
