// The OpenBLAS kernel choice: only a generic fallback core is ever replaced, and only by kernels
// the CPU runs; and this test binary itself runs on a non-generic core when the CPU allows one.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "runtime/blas_kernel.h"

using namespace tandem;

TEST_CASE("preferred OpenBLAS core: generic fallbacks upgraded to what the CPU runs", "[blas]") {
  const CpuFeatures avx512{true, true}, avx2{true, false}, sse{false, false};
  CHECK(preferred_openblas_core("Prescott", avx512) == "SkylakeX");
  CHECK(preferred_openblas_core("Prescott", avx2) == "Haswell");
  CHECK(preferred_openblas_core("Nehalem", avx2) == "Haswell");
  CHECK(preferred_openblas_core("Sandybridge", avx2) == "Haswell");
  CHECK(preferred_openblas_core("Prescott", sse).empty());     // nothing better to run
  CHECK(preferred_openblas_core("Sandybridge", sse).empty());  // a real Sandy Bridge stays
  CHECK(preferred_openblas_core("Haswell", avx512).empty());   // a detected modern core stays
  CHECK(preferred_openblas_core("Cooperlake", avx512).empty());
  CHECK(preferred_openblas_core("Zen", avx2).empty());
  CHECK(preferred_openblas_core("", avx512).empty());  // not OpenBLAS
}

TEST_CASE("this process runs the kernels select_blas_kernel chose", "[blas]") {
  const std::string core = openblas_core();
  if (core.empty()) {
    WARN("libblas.so.3 is not OpenBLAS here; nothing to check");
    return;
  }
  INFO(blas_description());
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) CHECK(preferred_openblas_core(core, cpu_features()).empty());
  CHECK(blas_description().find(core) != std::string::npos);
}
