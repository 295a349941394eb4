// The BLAS line names what LibTorch was built with, and the GEMM rate is a real, positive rate.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include "runtime/blas_kernel.h"

using namespace tandem;

TEST_CASE("blas_description names the BLAS of LibTorch's build", "[blas]") {
  const std::string line = blas_description();
  INFO(line);
  CHECK(line.rfind("BLAS: ", 0) == 0);
  CHECK(line.find("unknown") == std::string::npos);
  // The wheel's BLAS_INFO is what the line reports, not a name tandem assumes.
  const std::string config = at::show_config();
  const auto at = config.find("BLAS_INFO=");
  REQUIRE(at != std::string::npos);
  const std::string blas = config.substr(at + 10, config.find_first_of(",\n", at + 10) - at - 10);
  CHECK(line.find("BLAS: " + blas) == 0);
}

TEST_CASE("gemm_gflops measures a positive, finite rate", "[blas]") {
  const double rate = gemm_gflops(128, 2);
  CHECK(rate > 0.1);
  CHECK(rate < 1e6);
}
