// How many intra-op threads a rank should run: the CPUs it may use (its affinity mask, capped
// by a cgroup CPU quota) shared among the ranks that may use the same CPUs. Inheriting
// LibTorch's default instead oversubscribes: every rank of a node would start one thread per
// core, or one thread per core of the host inside a CPU-limited container.
#pragma once

#include <cstdint>
#include <string>

namespace tandem {

struct CpuBudget {
  int64_t hardware = 1;  // std::thread::hardware_concurrency()
  int64_t affinity = 1;  // CPUs in this process's affinity mask
  int64_t quota = 0;     // cgroup cpu.max quota / period, rounded up; 0 when unlimited
};

CpuBudget cpu_budget();

// A rank bound to fewer CPUs than the machine has owns them (launchers bind ranks to disjoint
// sets); an unbound rank shares every CPU with the other local ranks. Always >= 1.
int64_t intra_op_threads(const CpuBudget& cpus, int64_t local_ranks);

// "2 CPUs (affinity 2 of 2, no cgroup quota)" for the start-up log line.
std::string describe(const CpuBudget& cpus);

}  // namespace tandem
