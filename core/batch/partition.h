// Number partitioning for the scheduler: Karmarkar-Karp largest differencing (k-way) from
// several seedings, each followed by a move/swap refinement, the best kept; and first-fit-
// decreasing bin packing. Pure and deterministic: every rank computes the same answer from the
// same inputs.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

// Where a partition starts before refinement.
// KK merges the two tuples of largest spread; equal spreads (common with integer lengths) go to
// the older tuple, or "heavy first" to the tuple with the heavier top slot, as verl's
// karmarkar_karp orders its states. The orders reach different partitions.
enum class PartitionSeed {
  kSingletons,            // plain KK: every item its own k-tuple (w, 0, ..., 0); older first
  kSingletonsHeavyFirst,  // plain KK, heavy first: verl's karmarkar_karp(equal_size=False)
  kEqualSizeTuples,       // verl's karmarkar_karp(equal_size=True): items sorted by weight, cut into
                          // consecutive k-tuples, one item per part (a short last tuple when k does
                          // not divide n); heavy first
  kGreedy,                // longest processing time first: heaviest item to the lightest part
};
inline constexpr PartitionSeed kPartitionSeeds[] = {PartitionSeed::kSingletons, PartitionSeed::kSingletonsHeavyFirst,
                                                    PartitionSeed::kEqualSizeTuples, PartitionSeed::kGreedy};

// One seeding's k parts, unrefined (item indices per part, in no particular order).
std::vector<std::vector<int64_t>> seed_partition(const std::vector<double>& weights, int64_t k, PartitionSeed seed);

// Splits items (by weight) into k parts minimising the heaviest part. Returns, per part, the
// item indices in ascending order, heaviest part first. refine = true: every seeding of
// kPartitionSeeds, each followed by refine_partition, and the best kept (lightest heaviest part,
// then smallest spread, then the earlier seeding), so the result is never worse than any seeding
// alone, refined or not. refine = false: plain KK, the baseline.
std::vector<std::vector<int64_t>> karmarkar_karp(const std::vector<double>& weights, int64_t k, bool refine = true);

// The local search karmarkar_karp(refine = true) runs: single moves and pair swaps out of the
// heaviest part while they lower it.
void refine_partition(const std::vector<double>& weights, std::vector<std::vector<int64_t>>& parts);

// First-fit decreasing into bins of `capacity`. Every weight must be <= capacity.
std::vector<std::vector<int64_t>> first_fit_decreasing(const std::vector<double>& weights, double capacity);

// Fewest bins of `capacity` we can find, balanced when possible: tries KK with the lower bound
// ceil(sum / capacity) bins and up, and falls back to first-fit decreasing.
std::vector<std::vector<int64_t>> pack_bins(const std::vector<double>& weights, double capacity);

double part_weight(const std::vector<double>& weights, const std::vector<int64_t>& part);

// The heaviest part's weight (0 for no parts).
double max_part_weight(const std::vector<double>& weights, const std::vector<std::vector<int64_t>>& parts);

}  // namespace tandem
