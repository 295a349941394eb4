// StalenessProtocol: both sides' sequences of bridge crossings match for every start, length and
// staleness, and every sample's lag stays within max_staleness; drop_stale's histogram. (The
// transfers themselves cross real MPI ranks in tests/e2e/check_async.sh.)
#include <catch2/catch.hpp>

#include <string>

#include "core/batch/rollout_bridge.h"

using namespace tandem;

namespace {

struct Trace {
  std::string train, rollout;  // 'S' samples, 'W' weights, in order
  std::vector<int64_t> lags;   // per generated step
};

// Plays both sides. receive_shift moves the rollout's weight receipts (a broken protocol).
Trace play(const StalenessProtocol& p, int64_t receive_shift = 0) {
  Trace t;
  std::vector<int64_t> versions;  // of each weight publish, in order
  for (int64_t s = p.start; s < p.steps; ++s) {
    t.train += 'S';
    if (p.publish_after_receive(s)) t.train += 'W', versions.push_back(s);
    if (p.publish_after_update(s)) t.train += 'W', versions.push_back(s + 1);
  }
  int64_t version = p.start;
  size_t next = 0;
  for (int64_t s = p.start; s < p.steps; ++s) {
    if (p.receive_before_generate(s - receive_shift)) {
      t.rollout += 'W';
      version = next < versions.size() ? versions[next++] : -1;
    }
    t.lags.push_back(s - version);
    t.rollout += 'S';
  }
  return t;
}

}  // namespace

TEST_CASE("staleness protocol: train and rollout cross the bridge in one order; lags within K", "[bridge]") {
  int64_t cases = 0;
  for (int64_t k = 0; k <= 3; ++k)
    for (int64_t start = 0; start <= 3; ++start)
      for (int64_t steps = start + 1; steps <= start + 9; ++steps) {
        const StalenessProtocol p{start, steps, k};
        const Trace t = play(p);
        INFO("K " << k << " start " << start << " steps " << steps << ": " << t.train << " vs " << t.rollout);
        REQUIRE(t.train == t.rollout);
        for (size_t i = 0; i < t.lags.size(); ++i) {
          REQUIRE(t.lags[i] >= 0);
          REQUIRE(t.lags[i] <= k);
          if (k == 0) REQUIRE(t.lags[i] == 0);
          // After the first K steps rollout is exactly one version behind.
          if (k > 0 && static_cast<int64_t>(i) > k) REQUIRE(t.lags[i] == 1);
        }
        ++cases;
      }
  CHECK(cases > 100);
}

TEST_CASE("control: a rollout side that receives one step late no longer matches", "[bridge]") {
  const Trace t = play({0, 8, 1}, /*receive_shift=*/1);
  CHECK(t.train != t.rollout);
}

TEST_CASE("drop_stale keeps samples within K, counts lags and drops", "[bridge]") {
  std::vector<ArSample> samples(6);
  const int64_t versions[] = {5, 4, 3, 2, 5, 1};
  for (size_t i = 0; i < samples.size(); ++i)
    samples[i].policy_version = versions[i], samples[i].index = static_cast<int64_t>(i);
  std::vector<int64_t> hist;
  CHECK(drop_stale(samples, 5, 2, hist) == 2);
  CHECK(hist == std::vector<int64_t>{2, 1, 1});
  REQUIRE(samples.size() == 4);
  CHECK(samples[3].index == 4);  // order kept
  std::vector<ArSample> future(1);
  future[0].policy_version = 7;
  CHECK_THROWS(drop_stale(future, 5, 2, hist));
}
