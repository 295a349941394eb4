// Sub-communicators by MPI_Comm_split; the colour of a rank is its coordinates on the axes the
// group does not span, and the key its position along the axes it does.
#include "parallel/process_groups.h"

#include <stdexcept>
#include <string>

namespace tandem::parallel {

namespace {

// (colour, key) of `rank` for `axis`: ranks sharing a colour form one group, ordered by key.
std::pair<int64_t, int64_t> colour_key(const ParallelDims& d, int64_t rank, Axis axis) {
  const RankCoord c = d.coord(rank);
  switch (axis) {
    case Axis::kWorld:
      return {0, rank};
    case Axis::kDp:
      return {c.cp * d.tp() + c.tp, c.dp};
    case Axis::kCp:
      return {c.dp * d.tp() + c.tp, c.cp};
    case Axis::kTp:
      return {c.dp * d.cp() + c.cp, c.tp};
    case Axis::kDpCp:
      return {c.tp, c.dp * d.cp() + c.cp};
  }
  throw std::logic_error("unknown axis");
}

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw std::runtime_error(std::string(__FILE__) + ": " + what + ": " + std::string(msg, len));
  }
}

}  // namespace

std::vector<int64_t> group_members(const ParallelDims& dims, int64_t rank, Axis axis) {
  const int64_t colour = colour_key(dims, rank, axis).first;
  std::vector<std::pair<int64_t, int64_t>> members;  // (key, rank)
  for (int64_t r = 0; r < dims.world_size(); ++r) {
    const auto [c, k] = colour_key(dims, r, axis);
    if (c == colour) members.push_back({k, r});
  }
  std::sort(members.begin(), members.end());
  std::vector<int64_t> out;
  for (const auto& m : members) out.push_back(m.second);
  return out;
}

ProcessGroups::ProcessGroups(MPI_Comm world, const ParallelDims& dims) : dims_(dims) {
  int rank = 0, size = 0;
  check(MPI_Comm_rank(world, &rank), "MPI_Comm_rank");
  check(MPI_Comm_size(world, &size), "MPI_Comm_size");
  if (size != dims.world_size())
    throw std::invalid_argument("ProcessGroups: communicator has " + std::to_string(size) + " ranks, layout " +
                                dims.to_string());
  rank_ = rank;
  check(MPI_Comm_dup(world, &world_), "MPI_Comm_dup");
  auto split = [&](Axis axis, MPI_Comm* out) {
    const auto [colour, key] = colour_key(dims, rank, axis);
    check(MPI_Comm_split(world, static_cast<int>(colour), static_cast<int>(key), out), "MPI_Comm_split");
  };
  split(Axis::kDp, &dp_);
  split(Axis::kCp, &cp_);
  split(Axis::kTp, &tp_);
  split(Axis::kDpCp, &dp_cp_);
}

ProcessGroups::~ProcessGroups() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm* c : {&world_, &dp_, &cp_, &tp_, &dp_cp_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

MPI_Comm ProcessGroups::comm(Axis axis) const {
  switch (axis) {
    case Axis::kWorld:
      return world_;
    case Axis::kDp:
      return dp_;
    case Axis::kCp:
      return cp_;
    case Axis::kTp:
      return tp_;
    case Axis::kDpCp:
      return dp_cp_;
  }
  return MPI_COMM_NULL;
}

}  // namespace tandem::parallel
