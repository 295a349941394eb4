// ParallelDims {dp, cp, tp}: the one validated description of the process layout. Rank order is
// tp fastest, then cp, then dp (DESIGN section 4). Pure: no MPI here, so it is unit-tested alone.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::parallel {

struct RankCoord {
  int64_t dp = 0;
  int64_t cp = 0;
  int64_t tp = 0;
  bool operator==(const RankCoord& o) const { return dp == o.dp && cp == o.cp && tp == o.tp; }
};

class ParallelDims {
 public:
  // dp == -1 is inferred as world_size / (cp * tp). Throws UserError naming every factor when
  // the layout does not multiply out to world_size.
  static ParallelDims resolve(int64_t dp, int64_t cp, int64_t tp, int64_t world_size);

  int64_t dp() const { return dp_; }
  int64_t cp() const { return cp_; }
  int64_t tp() const { return tp_; }
  int64_t world_size() const { return dp_ * cp_ * tp_; }
  bool dp_enabled() const { return dp_ > 1; }
  bool cp_enabled() const { return cp_ > 1; }
  bool tp_enabled() const { return tp_ > 1; }

  RankCoord coord(int64_t rank) const;
  int64_t rank_of(const RankCoord& c) const;
  std::string to_string() const;  // "dp=2 cp=1 tp=2 (world 4)"

 private:
  ParallelDims(int64_t dp, int64_t cp, int64_t tp) : dp_(dp), cp_(cp), tp_(tp) {}
  int64_t dp_, cp_, tp_;
};

}  // namespace tandem::parallel
