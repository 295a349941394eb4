// dlsym finds openblas_get_corename only when OpenBLAS is the libblas.so.3 the alternatives
// system selected; with another BLAS nothing happens.
#include "runtime/blas_kernel.h"

#include <dlfcn.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace tandem {

namespace {

constexpr const char* kReexecGuard = "TANDEM_BLAS_REEXEC";
constexpr const char* kSeenVar = "TANDEM_BLAS_SEEN";  // the core OpenBLAS picked before the re-exec

// Cores OpenBLAS 0.3.x falls back to for a model it does not know (oldest first); none uses AVX2.
// Sandybridge (AVX, no FMA) is included: only a CPU with AVX2 + FMA is ever moved off it.
constexpr std::array<const char*, 11> kGenericCores = {"Katmai",  "Coppermine", "Northwood",  "Prescott",
                                                       "Banias",  "Core2",      "Penryn",     "Dunnington",
                                                       "Nehalem", "Atom",       "Sandybridge"};

}  // namespace

CpuFeatures cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
#endif
  return f;
}

std::string preferred_openblas_core(const std::string& loaded, const CpuFeatures& cpu) {
  bool generic = false;
  for (const char* c : kGenericCores) generic = generic || loaded == c;
  if (!generic) return "";
  if (cpu.avx512 && cpu.avx2_fma) return "SkylakeX";
  if (cpu.avx2_fma) return "Haswell";
  return "";
}

std::string openblas_core() {
  using CoreName = char* (*)();
  auto fn = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* name = fn ? fn() : nullptr;
  return name ? std::string(name) : std::string();
}

void select_blas_kernel(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv(kReexecGuard) != nullptr) return;
  const std::string loaded = openblas_core();
  const std::string want = preferred_openblas_core(loaded, cpu_features());
  if (want.empty()) return;
  setenv("OPENBLAS_CORETYPE", want.c_str(), 1);
  setenv(kReexecGuard, "1", 1);
  setenv(kSeenVar, loaded.c_str(), 1);
  execv("/proc/self/exe", argv);
  // exec failed: carry on with the kernels we have (and say so in blas_description()).
  unsetenv("OPENBLAS_CORETYPE");
  setenv(kSeenVar, (loaded + ", re-exec failed").c_str(), 1);
}

std::string blas_description() {
  const std::string core = openblas_core();
  if (core.empty()) return "BLAS: not OpenBLAS (libblas.so.3 from the alternatives system)";
  std::string out = "OpenBLAS " + core + " kernels";
  if (const char* seen = std::getenv(kSeenVar))
    out += std::string(" (chosen by tandem: OpenBLAS saw ") + seen + ")";
  else if (std::getenv("OPENBLAS_CORETYPE"))
    out += " (OPENBLAS_CORETYPE)";
  return out;
}

double gemm_gflops(int64_t n, int repeats) {
  const torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  torch::Tensor c = torch::mm(a, b);  // warm-up
  const int inner = n >= 2048 ? 1 : 10;
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) c = torch::mm(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / inner);
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best / 1e9;
}

}  // namespace tandem
