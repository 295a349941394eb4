// OpenBLAS chooses its kernels from CPUID once, when it loads. A build older than the CPU it runs
// on (Debian 12's OpenBLAS 0.3.21 on a Sapphire Rapids core, for one) does not know the model and
// falls back to its generic Prescott (SSE3) kernels: 31 GFLOP/s per core here where its SkylakeX
// (AVX-512) kernels give 140. The only switch is OPENBLAS_CORETYPE, read at load time, so the
// process re-executes itself once with it set. A value the user set is never touched.
#pragma once

#include <cstdint>
#include <string>

namespace tandem {

struct CpuFeatures {
  bool avx2_fma = false;
  bool avx512 = false;  // F, CD, BW, DQ and VL: what OpenBLAS's SkylakeX kernels use
};
CpuFeatures cpu_features();

// The OpenBLAS core to ask for when `loaded` (openblas_get_corename()) is a generic fallback
// that `cpu` outgrows; "" when the loaded one should stay.
std::string preferred_openblas_core(const std::string& loaded, const CpuFeatures& cpu);

// OpenBLAS's core name when OpenBLAS is the BLAS this process loaded, else "".
std::string openblas_core();

// Call first in main(), before any thread or MPI starts: re-executes /proc/self/exe with the
// same arguments and OPENBLAS_CORETYPE set when preferred_openblas_core() asks for it (once:
// TANDEM_BLAS_REEXEC guards the loop). Returns only when no re-exec happened.
void select_blas_kernel(char** argv);

// One line for the logs: "OpenBLAS SkylakeX kernels (chosen by tandem: OpenBLAS saw Prescott)".
std::string blas_description();

// Best-of-`repeats` float32 (n, n) x (n, n) torch::mm rate in GFLOP/s on the current threads: the
// rate every figure depends on, printed beside them because BLAS speed differs per machine.
double gemm_gflops(int64_t n = 512, int repeats = 5);

}  // namespace tandem
