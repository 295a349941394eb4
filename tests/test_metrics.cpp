// Weighted metric aggregation against the reference (tests/fixtures/metrics.json).
#include <catch2/catch.hpp>

#include "core/metrics.h"
#include "fixtures.h"

using namespace tandem;

TEST_CASE("aggregate_metrics matches the reference (1e-12 rel)", "[metrics]") {
  for (const auto& c : test::load_fixture("metrics.json")["cases"]) {
    SECTION(c["name"].get<std::string>()) {
      std::vector<MetricMap> micros;
      for (const auto& m : c["micros"]) micros.push_back(m.get<MetricMap>());
      const MetricMap got = aggregate_metrics(micros, c["weights"].get<std::vector<double>>());
      const MetricMap expected = c["expected"].get<MetricMap>();
      REQUIRE(got.size() == expected.size());
      for (const auto& [key, value] : expected) {
        INFO(key);
        REQUIRE(got.count(key));
        CHECK(test::rel_error(got.at(key), value, 1e-15) < 1e-12);
      }
    }
  }
}

TEST_CASE("equal weights give the plain mean", "[metrics]") {
  const MetricMap got = aggregate_metrics({{{"a", 1.0}}, {{"a", 2.0}}, {{"a", 6.0}}}, {0.5, 0.5, 0.5});
  CHECK(got.at("a") == Approx(3.0).epsilon(1e-15));
}

TEST_CASE("a key missing from a micro does not dilute the others", "[metrics]") {
  const MetricMap got = aggregate_metrics({{{"a", 1.0}, {"b", 4.0}}, {{"a", 3.0}}}, {1.0, 3.0});
  CHECK(got.at("a") == Approx(2.5));
  CHECK(got.at("b") == 4.0);  // only the first micro reported it
}

TEST_CASE("bad weights are rejected", "[metrics]") {
  CHECK_THROWS_AS(aggregate_metrics({{{"a", 1.0}}}, {1.0, 2.0}), std::invalid_argument);
  CHECK_THROWS_AS(aggregate_metrics({{{"a", 1.0}}}, {-1.0}), std::invalid_argument);
  CHECK_THROWS_AS(aggregate_metrics({{{"a", 1.0}}}, {std::nan("")}), std::invalid_argument);
}

TEST_CASE("zero total weight falls back to the plain mean", "[metrics]") {
  const MetricMap got = aggregate_metrics({{{"a", 1.0}}, {{"a", 5.0}}}, {0.0, 0.0});
  CHECK(got.at("a") == 3.0);
}
