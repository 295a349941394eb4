// pass@k against the exact rational reference of scripts/fixtures/make_pass_at_k.py (1e-12 relative).
#include <catch2/catch.hpp>

#include "core/eval/pass_at_k.h"
#include "fixtures.h"

using namespace tandem;

TEST_CASE("pass@k equals the exact reference on hand-made counts (1e-12)", "[eval]") {
  const auto& fx = test::load_fixture("pass_at_k.json");
  REQUIRE(fx["cases"].size() > 40);
  for (const auto& c : fx["cases"]) {
    const int64_t n = c["n"], k = c["k"], correct = c["c"];
    INFO("n " << n << " c " << correct << " k " << k);
    CHECK(test::rel_error(pass_at_k(n, correct, k), c["pass_at_k"].get<double>(), 1e-300) < 1e-12);
  }
  const auto& set = fx["set"];
  for (int64_t k = 1; k <= 8; ++k)
    CHECK(test::rel_error(mean_pass_at_k(8, set["correct"].get<std::vector<int64_t>>(), k),
                          set["mean"][std::to_string(k)].get<double>()) < 1e-12);
  // Control: the biased estimator (c / n)^... is not it; pass@1 is c / n exactly.
  CHECK(pass_at_k(10, 3, 1) == Approx(0.3).epsilon(1e-15));
  CHECK(pass_at_k(10, 3, 2) != Approx(1 - 0.7 * 0.7));
  CHECK_THROWS_AS(pass_at_k(4, 5, 1), std::invalid_argument);
  CHECK_THROWS_AS(pass_at_k(4, 1, 5), std::invalid_argument);
}
