// Catch2 main for the unit-test binary. The tests run on the BLAS kernels tandem itself runs on.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "runtime/blas_kernel.h"
#include "runtime/host_memory.h"

int main(int argc, char** argv) {
  tandem::select_blas_kernel(argv);
  tandem::keep_freed_host_memory();  // as the tandem binary runs
  return Catch::Session().run(argc, argv);
}
