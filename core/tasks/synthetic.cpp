// Generators of the built-in synthetic AR tasks; each prompt has its own random stream derived
// from (seed, task, index), so any prompt can be produced without replaying the ones before it.
#include "core/tasks/synthetic.h"

#include <algorithm>

#include "common/error.h"
#include "core/tasks/det_rng.h"
#include "core/tasks/shapes.h"

namespace tandem::tasks {

SyntheticOptions default_synthetic_options(SyntheticTask task) {
  if (task == SyntheticTask::kAdd) return {1, 3};
  if (task == SyntheticTask::kMultiply) return {2, 3};
  return {2, 5};
}

std::optional<SyntheticTask> synthetic_task_from_name(const std::string& name) {
  if (name == "reverse_digits") return SyntheticTask::kReverseDigits;
  if (name == "sort_digits") return SyntheticTask::kSortDigits;
  if (name == "add") return SyntheticTask::kAdd;
  if (name == "shape_corners") return SyntheticTask::kShapeCorners;
  if (name == "multiply") return SyntheticTask::kMultiply;
  return std::nullopt;
}

std::string synthetic_task_name(SyntheticTask task) {
  switch (task) {
    case SyntheticTask::kReverseDigits:
      return "reverse_digits";
    case SyntheticTask::kSortDigits:
      return "sort_digits";
    case SyntheticTask::kAdd:
      return "add";
    case SyntheticTask::kShapeCorners:
      return "shape_corners";
    case SyntheticTask::kMultiply:
      return "multiply";
  }
  return "?";
}

void validate_synthetic_options(SyntheticTask task, const SyntheticOptions& o) {
  if (o.min_digits < 1 || o.min_digits > o.max_digits || o.max_digits > kMaxSyntheticDigits)
    throw UserError("task " + synthetic_task_name(task) + ": need 1 <= min_digits <= max_digits <= " +
                    std::to_string(kMaxSyntheticDigits) + ", got min_digits " + std::to_string(o.min_digits) +
                    ", max_digits " + std::to_string(o.max_digits));
}

SyntheticLengths synthetic_max_lengths(SyntheticTask task, const SyntheticOptions& o) {
  if (task == SyntheticTask::kAdd) return {2 * o.max_digits + 2, o.max_digits + 1};        // "a+b=", carry
  if (task == SyntheticTask::kMultiply) return {2 * o.max_digits + 12, 2 * o.max_digits};  // "What is a * b?"
  if (task == SyntheticTask::kShapeCorners) {
    int64_t longest = 0;
    for (int64_t k = 0; k < kNumShapeKinds; ++k) longest = std::max<int64_t>(longest, shape_name(k).size());
    return {longest + 9, 2};  // "<shape> corners=", "12"
  }
  return {o.max_digits + 1, o.max_digits};
}

namespace {

// Distinct per task so two tasks run with one seed do not draw correlated digits.
uint64_t task_tag(SyntheticTask task) { return 0x7461736B00ull + static_cast<uint64_t>(task); }

std::string random_digits(DetRng& rng, int64_t count) {
  std::string s;
  for (int64_t i = 0; i < count; ++i) s.push_back(static_cast<char>('0' + rng.below(10)));
  return s;
}

// A decimal number of exactly `digits` digits (no leading zero unless it is "0"..."9").
int64_t random_number(DetRng& rng, int64_t digits) {
  int64_t value = digits == 1 ? rng.uniform(0, 9) : rng.uniform(1, 9);
  for (int64_t i = 1; i < digits; ++i) value = value * 10 + rng.uniform(0, 9);
  return value;
}

}  // namespace

int64_t shape_corners(int64_t label) {
  static constexpr int64_t kCorners[kNumShapeKinds] = {0, 4, 3, 12, 0, 4, 12, 8};
  if (label < 0 || label >= kNumShapeKinds)
    throw std::out_of_range("shape_corners: no shape class " + std::to_string(label));
  return kCorners[label];
}

Prompt generate_synthetic(SyntheticTask task, const SyntheticOptions& o, int64_t seed, int64_t index) {
  DetRng rng(hash_combine(hash_combine(static_cast<uint64_t>(seed), task_tag(task)), static_cast<uint64_t>(index)));
  Prompt p;
  p.id = index;
  switch (task) {
    case SyntheticTask::kReverseDigits: {
      const std::string digits = random_digits(rng, rng.uniform(o.min_digits, o.max_digits));
      p.text = digits + ">";
      p.answer.assign(digits.rbegin(), digits.rend());
      break;
    }
    case SyntheticTask::kSortDigits: {
      const std::string digits = random_digits(rng, rng.uniform(o.min_digits, o.max_digits));
      p.text = digits + ":";
      p.answer = digits;
      std::sort(p.answer.begin(), p.answer.end());
      break;
    }
    case SyntheticTask::kAdd: {
      const int64_t a = random_number(rng, rng.uniform(o.min_digits, o.max_digits));
      const int64_t b = random_number(rng, rng.uniform(o.min_digits, o.max_digits));
      p.text = std::to_string(a) + "+" + std::to_string(b) + "=";
      p.answer = std::to_string(a + b);
      break;
    }
    case SyntheticTask::kShapeCorners: {
      const auto label = static_cast<int64_t>(rng.below(static_cast<uint64_t>(kNumShapeKinds)));
      p.text = shape_name(label) + " corners=";
      p.answer = std::to_string(shape_corners(label));
      break;
    }
    case SyntheticTask::kMultiply: {
      const int64_t a = random_number(rng, rng.uniform(o.min_digits, o.max_digits));
      const int64_t b = random_number(rng, rng.uniform(o.min_digits, o.max_digits));
      p.text = "What is " + std::to_string(a) + " * " + std::to_string(b) + "?";
      p.answer = std::to_string(a * b);
      break;
    }
  }
  return p;
}

SyntheticSource::SyntheticSource(SyntheticTask task, const SyntheticOptions& options, int64_t seed)
    : task_(task), options_(options) {
  validate_synthetic_options(task, options);
  cursor_.seed = seed;
}

Prompt SyntheticSource::next() { return generate_synthetic(task_, options_, cursor_.seed, cursor_.position++); }

}  // namespace tandem::tasks
