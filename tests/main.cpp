// Catch2 main for the unit-test binary, with the host memory policy tandem itself runs with.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "runtime/blas_kernel.h"
#include "runtime/host_memory.h"

int main(int argc, char** argv) {
  tandem::keep_freed_host_memory();  // as the tandem binary runs
  tandem::reproducible_blas();
  return Catch::Session().run(argc, argv);
}
