// The intra-op thread rule: unbound ranks split the usable CPUs, bound ranks use what they are
// bound to, a cgroup quota caps both, and the answer is never 0.
#include <catch2/catch.hpp>

#include "runtime/cpu_threads.h"

using namespace tandem;

TEST_CASE("intra-op threads: the rank's share of the CPUs it may use", "[threads]") {
  CHECK(intra_op_threads({2, 2, 0}, 2) == 1);  // 2 unbound ranks on 2 cores
  CHECK(intra_op_threads({2, 2, 0}, 1) == 2);  // one rank takes both
  CHECK(intra_op_threads({16, 16, 0}, 4) == 4);
  CHECK(intra_op_threads({16, 1, 0}, 2) == 1);   // mpirun --bind-to core on a 16-core node
  CHECK(intra_op_threads({16, 4, 0}, 4) == 4);   // bound to 4 cores each
  CHECK(intra_op_threads({64, 64, 4}, 2) == 2);  // a 4-CPU container on a 64-core host
  CHECK(intra_op_threads({64, 64, 4}, 1) == 4);
  CHECK(intra_op_threads({2, 2, 0}, 3) == 1);  // oversubscribed: never 0
}

TEST_CASE("cpu_budget reads this machine", "[threads]") {
  const CpuBudget c = cpu_budget();
  CHECK(c.hardware >= 1);
  CHECK(c.affinity >= 1);
  CHECK(c.affinity <= c.hardware);
  CHECK(c.quota >= 0);
  CHECK(describe(c).find("affinity") != std::string::npos);
}
