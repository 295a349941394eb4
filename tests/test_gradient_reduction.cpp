// check_gradients: one collective and the float64 norm of all gradients; a non-finite gradient
// or loss anywhere skips the step. The multi-rank agreement is in tests/mpi/test_invariance.cpp.
#include <catch2/catch.hpp>

#include <cmath>

#include "loopback_communicator.h"
#include "parallel/gradient_reduction.h"

using namespace tandem;

namespace {

std::vector<torch::Tensor> params_with_grads(const std::vector<std::vector<double>>& grads) {
  std::vector<torch::Tensor> out;
  for (const auto& g : grads) {
    torch::Tensor p = torch::zeros({static_cast<int64_t>(g.size())}, torch::kFloat32).requires_grad_(true);
    p.mutable_grad() = torch::tensor(g, torch::kFloat32);
    out.push_back(p);
  }
  return out;
}

}  // namespace

TEST_CASE("check_gradients: one collective per step, the float64 norm, non-finite anywhere skips", "[gradients]") {
  test::Loopback comm;
  const auto params = params_with_grads({{3, 4}, {12}, {1e20f, 0}});  // squares past float32's range
  const parallel::GradientCheck ok = parallel::check_gradients(params, true, comm);
  CHECK(comm.collectives == 1);
  CHECK(ok.finite);
  const double want = std::sqrt(9.0 + 16 + 144 + static_cast<double>(1e20f) * static_cast<double>(1e20f));
  CHECK(std::abs(ok.norm - want) <= 1e-15 * want);

  CHECK_FALSE(parallel::check_gradients(params, false, comm).finite);  // the loss alone
  for (const double bad : {NAN, INFINITY, -INFINITY}) {
    const auto poisoned = params_with_grads({{3, 4}, {bad}});
    CHECK_FALSE(parallel::check_gradients(poisoned, true, comm).finite);
  }
  CHECK(comm.collectives == 5);

  // A parameter without a gradient counts as zero; none at all is a zero norm.
  std::vector<torch::Tensor> none = {torch::zeros({3}).requires_grad_(true)};
  const parallel::GradientCheck empty = parallel::check_gradients(none, true, comm);
  CHECK(empty.finite);
  CHECK(empty.norm == 0.0);
}
