// ParallelContext validation and the balanced shard split shared by every tp layer and loader.
#include "parallel/parallel_context.h"

#include <stdexcept>
#include <string>

namespace tandem::parallel {

namespace {

void check_axis(const char* axis, const Communicator* comm, int64_t rank, int64_t size) {
  const std::string a(axis);
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("ParallelContext: " + a + " rank " + std::to_string(rank) + " / size " +
                                std::to_string(size) + " is out of range");
  if (size > 1 && comm == nullptr)
    throw std::invalid_argument("ParallelContext: " + a + "_size " + std::to_string(size) + " needs a communicator");
  if (comm != nullptr && (comm->size() != size || comm->rank() != rank))
    throw std::invalid_argument("ParallelContext: " + a + " communicator " + comm->name() + " is rank " +
                                std::to_string(comm->rank()) + " of " + std::to_string(comm->size()) +
                                ", the context says " + std::to_string(rank) + " of " + std::to_string(size));
}

}  // namespace

ParallelContext ParallelContext::from(Communicator* tp, Communicator* cp) {
  ParallelContext c;
  c.tp = tp;
  c.cp = cp;
  if (tp != nullptr) c.tp_rank = tp->rank(), c.tp_size = tp->size();
  if (cp != nullptr) c.cp_rank = cp->rank(), c.cp_size = cp->size();
  return c;
}

void ParallelContext::validate() const {
  check_axis("tp", tp, tp_rank, tp_size);
  check_axis("cp", cp, cp_rank, cp_size);
}

ShardRange shard_range(int64_t total, int64_t rank, int64_t parts, int64_t unit) {
  if (parts < 1 || rank < 0 || rank >= parts || total < 0)
    throw std::invalid_argument("shard_range: rank " + std::to_string(rank) + " of " + std::to_string(parts) +
                                " over " + std::to_string(total));
  const int64_t base = total / parts, extra = total % parts;
  const int64_t begin = rank * base + (rank < extra ? rank : extra);
  const int64_t size = base + (rank < extra ? 1 : 0);
  return {begin * unit, (begin + size) * unit};
}

}  // namespace tandem::parallel
