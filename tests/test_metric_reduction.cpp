// MetricReduction: values by name, one collective per kind, errors for names never added.
#include <catch2/catch.hpp>

#include "core/run/metric_reduction.h"
#include "loopback_communicator.h"

using namespace tandem;

TEST_CASE("named sums and maxima reduce in one collective each and read back by name", "[metrics]") {
  MetricReduction r;
  r.sum("tokens", 10);
  r.sum("loss", 2.5);
  r.sum("tokens", 6);
  r.max("ratio_dev", 0.25);
  r.max("ratio_dev", 0.5);
  test::Loopback comm;
  CHECK_THROWS_AS(r["tokens"], std::logic_error);  // before reduce
  r.reduce(comm);
  CHECK(comm.collectives == 2);
  CHECK(r["tokens"] == 16);
  CHECK(r["loss"] == 2.5);
  CHECK(r["ratio_dev"] == 0.5);
  CHECK(r.ratio("loss", "tokens") == Approx(2.5 / 16));
  CHECK_THROWS_AS(r["lose"], std::out_of_range);
  MetricReduction empty;
  empty.sum("n", 0);
  empty.sum("x", 3);
  empty.reduce(comm);
  CHECK(empty.ratio("x", "n") == 0.0);
}
