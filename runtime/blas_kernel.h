// The BLAS behind LibTorch's CPU GEMMs and the rate it gives here. PyTorch's wheel links Intel's
// oneMKL statically, so there is no libblas.so.3 to choose and no kernel to pin (the OpenBLAS
// switches of the Debian LibTorch era are gone); what is left is saying which BLAS and which CPU
// capability ran, beside the GEMM rate every figure depends on.
#pragma once

#include <cstdint>
#include <string>

namespace tandem {

// Call first in main(), before any GEMM: oneMKL's strict conditional numerical reproducibility
// (as MKL_CBWR=AUTO,STRICT) unless the environment sets MKL_CBWR itself. Without it a threaded
// GEMM's sums could come out in another order when another thread's GEMMs compete for the cores:
// train.overlap's sampler beside its forward thread changed low bits in ~4% of runs
// (e2e.overlap_threads: 4 of 110 runs without, 0 of 280 with), and the mid bench step's time did
// not change measurably. Also runs warm_vector_math() once. Returns what it did, for the log
// (blas_description() includes it).
const std::string& reproducible_blas();

// oneMKL's vector math (VML: ATen's float32 / float64 cos, sin, exp, log, sqrt, tanh, erf) sets
// itself up on its first call, and that first call races when several threads make it at once: in
// ~1% of fresh processes at 3 threads on 2 cores one chunk of the first parallel float64 cos was up
// to 7e-9 off, so the first forward's RoPE tables, and every weight trained after them, changed
// from run to run. This makes that first call on the calling thread alone (tensors below ATen's
// grain size). scripts/check_vml_first_call.sh counts fresh processes with and without it.
void warm_vector_math();

// One line for the logs, from LibTorch's own build configuration, e.g.
// "BLAS: mkl (oneMKL 2024.2), ATen CPU capability AVX512".
std::string blas_description();

// Best-of-`repeats` float32 (n, n) x (n, n) torch::mm rate in GFLOP/s on the current threads: the
// rate every figure depends on, printed beside them because BLAS speed differs per machine.
double gemm_gflops(int64_t n = 512, int repeats = 5);

}  // namespace tandem
