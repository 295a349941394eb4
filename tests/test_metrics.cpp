// Weighted metric aggregation against the reference (tests/fixtures/metrics.json).
#include <catch2/catch.hpp>

#include "core/run/metrics.h"
#include "fixtures.h"

#include <unistd.h>

#include <filesystem>

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

TEST_CASE("metrics.jsonl: one line per step, truncated past the resumed step", "[metrics]") {
  const std::string dir = std::filesystem::temp_directory_path() / ("tandem_metrics_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    MetricsWriter w(dir, -1);
    for (int64_t s = 1; s <= 5; ++s) w.write(s, {{"reward/mean", 0.1 * s}, {"time/step_s", 1.0}});
  }
  auto lines = read_metrics_jsonl(dir + "/metrics.jsonl");
  REQUIRE(lines.size() == 5);
  CHECK(lines[2].first == 3);
  CHECK(lines[2].second.at("reward/mean") == 0.1 * 3);  // full precision round trip
  {
    MetricsWriter w(dir, 3);  // resume from the step-3 checkpoint
    w.write(4, {{"reward/mean", 9.0}});
  }
  lines = read_metrics_jsonl(dir + "/metrics.jsonl");
  REQUIRE(lines.size() == 4);
  CHECK(lines.back().second.at("reward/mean") == 9.0);
  // A fresh start over an earlier attempt (no checkpoint: step 0) drops its step-0 line too, which
  // the new run writes again (eval.at_start): no duplicate.
  {
    MetricsWriter w(dir, -1);
    w.write(0, {{"eval/reward_mean", 0.5}});
  }
  {
    MetricsWriter w(dir, 0);
    w.write(0, {{"eval/reward_mean", 0.25}});
  }
  lines = read_metrics_jsonl(dir + "/metrics.jsonl");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].second.at("eval/reward_mean") == 0.25);
  CHECK(is_timing_metric("time/step_s"));
  CHECK_FALSE(is_timing_metric("reward/mean"));
  std::filesystem::remove_all(dir);
}
