// The MPI process runtime: init/finalize, world rank/size, the node-local rank (for picking a
// GPU), and the job-wide abort used when a rank fails, so no rank is left hanging.
#pragma once

namespace tandem::parallel {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes of this node
  int local_size() const { return local_size_; }  // processes of this job on this node

  // Ends every rank of the job with `code` (MPI_Abort on MPI_COMM_WORLD). Never returns.
  [[noreturn]] static void abort_job(int code);

  // Start-up agreement, collective over the world: each rank says whether it failed; returns the
  // lowest rank that did (the one that reports), or -1 when none did. Lets every rank exit
  // through a clean finalize with one message instead of each printing its own and aborting.
  static int first_failed_rank(bool failed);

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

}  // namespace tandem::parallel
