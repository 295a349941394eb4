// Number partitioning for the scheduler: Karmarkar-Karp largest differencing (k-way) with a
// move/swap refinement, and first-fit-decreasing bin packing. Pure and deterministic: every
// rank computes the same answer from the same inputs.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {

// Splits items (by weight) into k parts minimising the heaviest part. Returns, per part, the
// item indices in ascending order. `refine` runs the local search after KK (never worse).
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

}  // namespace tandem
