// Process groups: the world, dp, cp, tp and dp x cp sub-communicators of one ParallelDims
// layout. group_members() is the pure layout function (tested without MPI); ProcessGroups
// holds the MPI communicators and is passed explicitly to whoever needs them.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "parallel/parallel_dims.h"

namespace tandem::parallel {

enum class Axis { kWorld, kDp, kCp, kTp, kDpCp };

// World ranks of the `axis` group that `rank` belongs to, in group-rank order.
std::vector<int64_t> group_members(const ParallelDims& dims, int64_t rank, Axis axis);

class ProcessGroups {
 public:
  // Splits `world` (which must have dims.world_size() ranks) into the sub-communicators.
  ProcessGroups(MPI_Comm world, const ParallelDims& dims);
  ~ProcessGroups();
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;

  const ParallelDims& dims() const { return dims_; }
  int64_t rank() const { return rank_; }
  RankCoord coord() const { return dims_.coord(rank_); }
  MPI_Comm comm(Axis axis) const;

 private:
  ParallelDims dims_;
  int64_t rank_ = 0;
  MPI_Comm world_ = MPI_COMM_NULL, dp_ = MPI_COMM_NULL, cp_ = MPI_COMM_NULL, tp_ = MPI_COMM_NULL,
           dp_cp_ = MPI_COMM_NULL;
};

}  // namespace tandem::parallel
