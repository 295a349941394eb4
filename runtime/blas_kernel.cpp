// Reads at::show_config(), the text torch.__config__.show() prints, so the log names what this
// LibTorch was built with rather than what tandem assumes.
#include "runtime/blas_kernel.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>

namespace tandem {

namespace {

// The value after `key` up to the next ',' or end of line; "" when absent.
std::string config_value(const std::string& config, const std::string& key) {
  const auto at = config.find(key);
  if (at == std::string::npos) return "";
  const auto begin = at + key.size();
  const auto end = config.find_first_of(",\n", begin);
  return config.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

}  // namespace

// oneMKL's mkl_cbwr_set, under the name LibTorch's static oneMKL exports it (weak: absent from a
// LibTorch built on another BLAS). The environment variable cannot be set from here: oneMKL reads it
// while the libraries load, before main().
extern "C" int mkl_serv_cbwr_set(int) __attribute__((weak));

namespace {

std::string set_strict_reproducibility() {
  if (const char* v = std::getenv("MKL_CBWR")) return "MKL_CBWR=" + std::string(v) + " (the environment's)";
  if (!mkl_serv_cbwr_set) return "no oneMKL branch to set (another BLAS)";
  constexpr int kAuto = 2, kStrict = 0x10000;  // MKL_CBWR_AUTO | MKL_CBWR_STRICT
  const int rc = mkl_serv_cbwr_set(kAuto | kStrict);
  return rc == 0 ? "oneMKL strict reproducibility (MKL_CBWR=AUTO,STRICT)"
                 : "oneMKL refused strict reproducibility (mkl_cbwr_set returned " + std::to_string(rc) + ")";
}

}  // namespace

// Each function on both dtypes, in case VML sets up per function or per precision: a few
// microseconds once, against a race whose loser trains other weights.
void warm_vector_math() {
  for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {
    const torch::Tensor x = torch::full({8}, 0.5, torch::TensorOptions().dtype(dtype));  // (8)
    (void)x.cos(), (void)x.sin(), (void)x.exp(), (void)x.log(), (void)x.sqrt(), (void)x.tanh(), (void)x.erf();
  }
}

const std::string& reproducible_blas() {
  static const std::string what = [] {
    std::string done = set_strict_reproducibility();
    warm_vector_math();  // after the branch is set, before any parallel call
    return done;
  }();
  return what;
}

std::string blas_description() {
  const std::string config = at::show_config();
  std::string blas = config_value(config, "BLAS_INFO=");
  if (blas.empty()) blas = "unknown";
  std::string out = "BLAS: " + blas;
  if (const auto mkl = config.find("Math Kernel Library Version "); mkl != std::string::npos) {
    std::istringstream version(config.substr(mkl + 28));
    std::string v;
    version >> v;
    out += " (oneMKL " + v.substr(0, v.find('-')) + ")";  // "2024.2-Product" -> "2024.2"
  }
  const std::string capability = config_value(config, "CPU capability usage: ");
  if (!capability.empty()) out += ", ATen CPU capability " + capability;
  out += ", " + reproducible_blas();
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
