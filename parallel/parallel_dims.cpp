// Layout arithmetic for ParallelDims; every failure names all factors so a user can fix the
// launch line without reading code.
#include "parallel/parallel_dims.h"

#include <sstream>

#include "common/error.h"

namespace tandem::parallel {

namespace {
std::string describe(int64_t dp, int64_t cp, int64_t tp, int64_t world) {
  std::ostringstream s;
  s << "parallel layout dp=" << dp << " cp=" << cp << " tp=" << tp << " with world size " << world;
  return s.str();
}
}  // namespace

ParallelDims ParallelDims::resolve(int64_t dp, int64_t cp, int64_t tp, int64_t world_size) {
  const std::string what = describe(dp, cp, tp, world_size);
  if (world_size < 1) throw UserError(what + ": world size must be >= 1");
  if (cp < 1 || tp < 1) throw UserError(what + ": cp and tp must be >= 1");
  if (dp == -1) {
    if (world_size % (cp * tp) != 0)
      throw UserError(what + ": cannot infer dp, since cp*tp=" + std::to_string(cp * tp) +
                      " does not divide the world size " + std::to_string(world_size) +
                      "; launch a multiple of cp*tp ranks");
    dp = world_size / (cp * tp);
  }
  if (dp < 1) throw UserError(what + ": dp must be >= 1 or -1 (inferred)");
  if (dp * cp * tp != world_size)
    throw UserError(what + ": dp*cp*tp=" + std::to_string(dp * cp * tp) + " != world size " +
                    std::to_string(world_size) + "; set parallel.dp=-1 to infer it, or launch dp*cp*tp ranks");
  return ParallelDims(dp, cp, tp);
}

RankCoord ParallelDims::coord(int64_t rank) const {
  RankCoord c;
  c.tp = rank % tp_;
  c.cp = (rank / tp_) % cp_;
  c.dp = rank / (tp_ * cp_);
  return c;
}

int64_t ParallelDims::rank_of(const RankCoord& c) const { return (c.dp * cp_ + c.cp) * tp_ + c.tp; }

std::string ParallelDims::to_string() const {
  std::ostringstream s;
  s << "dp=" << dp_ << " cp=" << cp_ << " tp=" << tp_ << " (world " << world_size() << ")";
  return s.str();
}

}  // namespace tandem::parallel
