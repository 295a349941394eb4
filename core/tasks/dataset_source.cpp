// Epoch bookkeeping and the deterministic per-epoch shuffle of a finite prompt list.
#include "core/tasks/dataset_source.h"

#include <numeric>
#include <utility>

#include "common/error.h"
#include "core/tasks/det_rng.h"

namespace tandem::tasks {

namespace {
constexpr uint64_t kShuffleTag = 0x73687566666C65ull;  // "shuffle"
}

std::vector<int64_t> epoch_permutation(int64_t n, int64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  DetRng rng(hash_combine(hash_combine(static_cast<uint64_t>(seed), kShuffleTag), static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

DatasetSource::DatasetSource(std::vector<Prompt> prompts, bool shuffle, int64_t seed, std::string name)
    : prompts_(std::move(prompts)), shuffle_(shuffle), name_(std::move(name)) {
  if (prompts_.empty()) throw UserError(name_ + ": the dataset has no prompts");
  cursor_.seed = seed;
}

void DatasetSource::restore(const DataCursor& cursor) {
  if (cursor.position > static_cast<int64_t>(prompts_.size()))
    throw UserError(name_ + ": the data cursor's position " + std::to_string(cursor.position) +
                    " is past the end of the dataset (" + std::to_string(prompts_.size()) +
                    " prompts); did the dataset change since the checkpoint?");
  cursor_ = cursor;
  order_epoch_ = -1;  // the seed may differ: rebuild the order
}

void DatasetSource::ensure_order() {
  if (order_epoch_ == cursor_.epoch) return;
  const auto n = static_cast<int64_t>(prompts_.size());
  if (shuffle_) {
    order_ = epoch_permutation(n, cursor_.seed, cursor_.epoch);
  } else {
    order_.resize(static_cast<size_t>(n));
    std::iota(order_.begin(), order_.end(), int64_t{0});
  }
  order_epoch_ = cursor_.epoch;
}

Prompt DatasetSource::next() {
  if (cursor_.position >= static_cast<int64_t>(prompts_.size())) {
    ++cursor_.epoch;
    cursor_.position = 0;
  }
  ensure_order();
  return prompts_[static_cast<size_t>(order_[static_cast<size_t>(cursor_.position++)])];
}

}  // namespace tandem::tasks
