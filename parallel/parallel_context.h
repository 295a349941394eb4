// ParallelContext: the tp and cp communicators a model layer needs, passed in explicitly
// (nullptr means size 1), and the balanced split of a dimension into per-rank shards.
#pragma once

#include <cstdint>

#include "parallel/communicator.h"

namespace tandem::parallel {

struct ParallelContext {
  Communicator* tp = nullptr;
  Communicator* cp = nullptr;
  int64_t tp_rank = 0, tp_size = 1;
  int64_t cp_rank = 0, cp_size = 1;

  // Ranks and sizes read from the communicators (either may be nullptr).
  static ParallelContext from(Communicator* tp, Communicator* cp);
  bool tp_enabled() const { return tp_size > 1; }
  bool cp_enabled() const { return cp_size > 1; }
  // Throws std::invalid_argument when a size > 1 has no communicator, a communicator disagrees
  // with its size / rank, or a rank is out of range.
  void validate() const;
};

// [begin, end) of one rank's shard of a dimension.
struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Balanced split of `total` units over `parts` ranks: the first total % parts ranks get one
// unit more. `unit` scales the result (e.g. head_dim when splitting heads).
ShardRange shard_range(int64_t total, int64_t rank, int64_t parts, int64_t unit = 1);

}  // namespace tandem::parallel
