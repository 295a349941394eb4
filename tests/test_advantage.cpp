// GRPO advantages against the independent reference (tests/fixtures/advantage.json).
#include <catch2/catch.hpp>

#include "core/grpo/advantage.h"
#include "fixtures.h"

using namespace tandem;

namespace {
AdvantageOptions options_of(const nlohmann::json& c) {
  AdvantageOptions o;
  o.norm_by_std = c["norm_by_std"].get<bool>();
  o.eps = c["eps"].get<double>();
  if (!c["clip"].is_null()) o.clip = c["clip"].get<double>();
  return o;
}
}  // namespace

TEST_CASE("grpo_advantages matches the reference in float64 (1e-12 rel) and float32 (1e-6)", "[advantage]") {
  for (const auto& c : test::load_fixture("advantage.json")["cases"]) {
    SECTION(c["name"].get<std::string>()) {
      const torch::Tensor expected = test::to_tensor(c["expected"], torch::kFloat64);
      const torch::Tensor ids = test::to_index(c["group_ids"]);
      const torch::Tensor a64 = grpo_advantages(test::to_tensor(c["rewards"], torch::kFloat64), ids, options_of(c));
      CHECK(a64.scalar_type() == torch::kFloat64);
      // Absolute floor 1e-12: zero-variance and size-1 groups give exact zeros.
      CHECK(test::max_rel_error(a64, expected, 1e-12) < 1e-12);
      const torch::Tensor a32 = grpo_advantages(test::to_tensor(c["rewards"], torch::kFloat32), ids, options_of(c));
      CHECK(a32.scalar_type() == torch::kFloat32);
      CHECK(test::max_rel_error(a32, expected, 1e-3) < 1e-5);
    }
  }
}

TEST_CASE("a group of one gets zero advantage in both modes", "[advantage]") {
  const torch::Tensor r = torch::tensor({1.0, 5.0, 3.0}, torch::kFloat64);
  const torch::Tensor ids = torch::tensor({4, 4, 9}, torch::kInt64);
  for (bool norm : {true, false}) {
    AdvantageOptions o;
    o.norm_by_std = norm;
    const torch::Tensor a = grpo_advantages(r, ids, o);
    CHECK(a[2].item<double>() == 0.0);
    CHECK(a[0].item<double>() == -a[1].item<double>());
  }
}

TEST_CASE("advantages do not depend on the order or labels of groups", "[advantage]") {
  torch::manual_seed(33);
  const torch::Tensor r = torch::rand({40}, torch::kFloat64);
  const torch::Tensor ids = torch::randint(0, 6, {40}, torch::kInt64);
  const torch::Tensor perm = torch::randperm(40, torch::kInt64);
  AdvantageOptions o;
  const torch::Tensor a = grpo_advantages(r, ids, o);
  const torch::Tensor b = grpo_advantages(r.index_select(0, perm), (ids * 7 + 100).index_select(0, perm), o);
  // A permutation reorders each group's float64 sums, so the two agree to rounding, not to the bit:
  // measured against the advantages' own scale (floor 1; they are O(1) by construction), since a
  // reward that sits on its group's mean has an advantage of rounding size and no relative error
  // to speak of (a relative 1e-12 failed that way on a CI host).
  CHECK(test::max_rel_error(b, a.index_select(0, perm), 1.0) < 1e-12);
  // Control: the same rewards under labels that do not follow the permutation change the groups.
  const torch::Tensor c = grpo_advantages(r.index_select(0, perm), ids, o);
  CHECK(test::max_rel_error(c, a.index_select(0, perm), 1.0) > 1e-2);
}

TEST_CASE("group stats report mean, std and size per sample", "[advantage]") {
  const torch::Tensor r = torch::tensor({1.0, 3.0, 10.0}, torch::kFloat64);
  const torch::Tensor ids = torch::tensor({2, 2, 5}, torch::kInt64);
  GroupStats s;
  grpo_advantages(r, ids, AdvantageOptions{}, &s);
  CHECK(s.mean[0].item<double>() == 2.0);
  CHECK(s.std[1].item<double>() == Approx(std::sqrt(2.0)));
  CHECK(s.size[2].item<int64_t>() == 1);
  CHECK(s.std[2].item<double>() == 0.0);
}

TEST_CASE("empty rollout gives empty advantages", "[advantage]") {
  const torch::Tensor a = grpo_advantages(torch::zeros({0}, torch::kFloat64), torch::zeros({0}, torch::kInt64), {});
  CHECK(a.numel() == 0);
}
