// ParallelDims: inference of dp, the rank layout (tp fastest), and the layouts that must fail.
#include <catch2/catch.hpp>

#include "common/error.h"
#include "parallel/parallel_dims.h"

using tandem::UserError;
using tandem::parallel::ParallelDims;
using tandem::parallel::RankCoord;

TEST_CASE("dp is inferred from the world size", "[parallel_dims]") {
  const ParallelDims d = ParallelDims::resolve(-1, 2, 2, 8);
  CHECK(d.dp() == 2);
  CHECK(d.dp_enabled());
  CHECK(d.cp_enabled());
  CHECK(d.tp_enabled());
  CHECK_FALSE(ParallelDims::resolve(-1, 1, 1, 1).dp_enabled());
}

TEST_CASE("rank layout: tp fastest, then cp, then dp; round-trips", "[parallel_dims]") {
  const ParallelDims d = ParallelDims::resolve(2, 3, 2, 12);
  CHECK(d.coord(0) == RankCoord{0, 0, 0});
  CHECK(d.coord(1) == RankCoord{0, 0, 1});
  CHECK(d.coord(2) == RankCoord{0, 1, 0});
  CHECK(d.coord(6) == RankCoord{1, 0, 0});
  CHECK(d.coord(11) == RankCoord{1, 2, 1});
  for (int64_t r = 0; r < 12; ++r) CHECK(d.rank_of(d.coord(r)) == r);
}

TEST_CASE("layouts that do not multiply out fail naming every factor", "[parallel_dims]") {
  CHECK_THROWS_WITH(ParallelDims::resolve(3, 1, 1, 4), Catch::Contains("dp=3") && Catch::Contains("cp=1") &&
                                                           Catch::Contains("tp=1") && Catch::Contains("world size 4"));
  CHECK_THROWS_AS(ParallelDims::resolve(-1, 3, 1, 4), UserError);
  CHECK_THROWS_AS(ParallelDims::resolve(0, 1, 1, 4), UserError);
  CHECK_THROWS_AS(ParallelDims::resolve(2, 0, 1, 4), UserError);
  CHECK_THROWS_AS(ParallelDims::resolve(1, 1, 1, 0), UserError);
}
