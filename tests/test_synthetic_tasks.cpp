// Built-in synthetic tasks: deterministic from (seed, index), correct answers, configurable
// difficulty, and only characters the default char tokenizer can encode.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "common/error.h"
#include "core/config/config.h"
#include "core/tasks/shapes.h"
#include "core/tasks/synthetic.h"
#include "models/tokenizers/tokenizer.h"

using namespace tandem;
using namespace tandem::tasks;

namespace {
// The char tokenizer's tasks; multiply asks in words, for hf tokenizers.
const std::vector<SyntheticTask> kCharTasks{SyntheticTask::kReverseDigits, SyntheticTask::kSortDigits,
                                            SyntheticTask::kAdd, SyntheticTask::kShapeCorners};

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}
}  // namespace

TEST_CASE("synthetic prompts are a pure function of (task, options, seed, index)", "[tasks]") {
  std::vector<SyntheticTask> all = kCharTasks;
  all.push_back(SyntheticTask::kMultiply);
  for (SyntheticTask task : all) {
    const SyntheticOptions o = default_synthetic_options(task);
    SyntheticSource a(task, o, 7), b(task, o, 7), c(task, o, 8);
    int differing = 0;
    for (int64_t i = 0; i < 100; ++i) {
      const Prompt pa = a.next(), pb = b.next(), pc = c.next();
      CHECK(pa.text == pb.text);
      CHECK(pa.answer == pb.answer);
      CHECK(pa.id == i);
      const Prompt direct = generate_synthetic(task, o, 7, i);
      CHECK(direct.text == pa.text);
      differing += pa.text != pc.text;
    }
    CHECK(differing > 50);  // another seed is another stream
  }
  // Pinned: checkpoints promise the same prompts on every platform.
  CHECK(generate_synthetic(SyntheticTask::kReverseDigits, {2, 5}, 1, 0).text == "9886>");
  CHECK(generate_synthetic(SyntheticTask::kAdd, {1, 3}, 1, 0).text == "139+8=");
  CHECK(generate_synthetic(SyntheticTask::kMultiply, {2, 3}, 1, 0).text == "What is 47 * 233?");
}

TEST_CASE("multiply asks for a product in words and answers it", "[tasks]") {
  std::set<size_t> lengths;
  for (int64_t i = 0; i < 500; ++i) {
    const Prompt p = generate_synthetic(SyntheticTask::kMultiply, {2, 3}, 3, i);
    const std::string head = "What is ", times = " * ";
    REQUIRE(p.text.compare(0, head.size(), head) == 0);
    REQUIRE(p.text.back() == '?');
    const size_t at = p.text.find(times);
    REQUIRE(at != std::string::npos);
    const std::string x = p.text.substr(head.size(), at - head.size());
    const std::string y = p.text.substr(at + times.size(), p.text.size() - at - times.size() - 1);
    CHECK(all_digits(x));
    CHECK(all_digits(y));
    CHECK((x.size() >= 2 && x.size() <= 3 && x[0] != '0'));
    CHECK((y.size() >= 2 && y.size() <= 3 && y[0] != '0'));
    CHECK(p.answer == std::to_string(std::stoll(x) * std::stoll(y)));
    const SyntheticLengths bound = synthetic_max_lengths(SyntheticTask::kMultiply, {2, 3});
    CHECK(static_cast<int64_t>(p.text.size()) <= bound.prompt);
    CHECK(static_cast<int64_t>(p.answer.size()) <= bound.answer);
    lengths.insert(x.size() + y.size());
  }
  CHECK(lengths == std::set<size_t>{4, 5, 6});
  const Prompt big = generate_synthetic(SyntheticTask::kMultiply, {kMaxSyntheticDigits, kMaxSyntheticDigits}, 1, 0);
  CHECK(big.answer.size() >= static_cast<size_t>(2 * kMaxSyntheticDigits - 1));  // within int64
}

TEST_CASE("synthetic answers are correct", "[tasks]") {
  for (int64_t i = 0; i < 500; ++i) {
    const Prompt r = generate_synthetic(SyntheticTask::kReverseDigits, {2, 5}, 3, i);
    REQUIRE(r.text.back() == '>');
    const std::string digits = r.text.substr(0, r.text.size() - 1);
    CHECK(all_digits(digits));
    CHECK(r.answer == std::string(digits.rbegin(), digits.rend()));

    const Prompt s = generate_synthetic(SyntheticTask::kSortDigits, {2, 5}, 3, i);
    REQUIRE(s.text.back() == ':');
    std::string sorted = s.text.substr(0, s.text.size() - 1);
    CHECK(all_digits(sorted));
    std::sort(sorted.begin(), sorted.end());
    CHECK(s.answer == sorted);

    const Prompt a = generate_synthetic(SyntheticTask::kAdd, {1, 3}, 3, i);
    const size_t plus = a.text.find('+');
    REQUIRE(plus != std::string::npos);
    REQUIRE(a.text.back() == '=');
    const std::string x = a.text.substr(0, plus), y = a.text.substr(plus + 1, a.text.size() - plus - 2);
    CHECK(all_digits(x));
    CHECK(all_digits(y));
    CHECK((x.size() == 1 || x[0] != '0'));  // no leading zeros
    CHECK((y.size() == 1 || y[0] != '0'));
    CHECK(a.answer == std::to_string(std::stoll(x) + std::stoll(y)));
  }
}

TEST_CASE("shape_corners asks about every shape class and answers its corner count", "[tasks]") {
  const std::map<std::string, std::string> corners{{"circle", "0"},   {"square", "4"}, {"triangle", "3"},
                                                   {"cross", "12"},   {"ring", "0"},   {"diamond", "4"},
                                                   {"saltire", "12"}, {"frame", "8"}};
  std::set<std::string> asked;
  for (int64_t i = 0; i < 400; ++i) {
    const Prompt p = generate_synthetic(SyntheticTask::kShapeCorners, {}, 4, i);
    const std::string suffix = " corners=";
    REQUIRE(p.text.size() > suffix.size());
    REQUIRE(p.text.substr(p.text.size() - suffix.size()) == suffix);
    const std::string shape = p.text.substr(0, p.text.size() - suffix.size());
    REQUIRE(corners.count(shape) == 1);
    CHECK(p.answer == corners.at(shape));
    asked.insert(shape);
  }
  CHECK(asked.size() == corners.size());  // all eight classes come up
  for (int64_t k = 0; k < kNumShapeKinds; ++k) CHECK(std::to_string(shape_corners(k)) == corners.at(shape_name(k)));
  CHECK_THROWS_AS(shape_corners(kNumShapeKinds), std::out_of_range);
}

TEST_CASE("synthetic prompts use only the default alphabet and fit the quickstart model", "[tasks]") {
  const std::string alphabet = TokenizerConfig{}.alphabet;
  const auto tokenizer = models::make_char_tokenizer(alphabet);
  for (SyntheticTask task : kCharTasks) {
    const SyntheticOptions o = default_synthetic_options(task);
    const SyntheticLengths bound = synthetic_max_lengths(task, o);
    CHECK(bound.prompt + bound.answer + 2 <= 32);  // + BOS + EOS, quickstart max_seq_len 32
    CHECK(bound.answer + 1 <= 8);                  // + EOS, quickstart max_new_tokens 8
    for (int64_t i = 0; i < 2000; ++i) {
      const Prompt p = generate_synthetic(task, o, 1, i);
      for (char c : p.text + p.answer) CHECK(alphabet.find(c) != std::string::npos);
      CHECK(static_cast<int64_t>(p.text.size()) <= bound.prompt);
      CHECK(static_cast<int64_t>(p.answer.size()) <= bound.answer);
      const auto ids = tokenizer->encode(p.text + p.answer);
      CHECK(tokenizer->decode(ids) == p.text + p.answer);
    }
  }
}

TEST_CASE("synthetic difficulty follows the digit range", "[tasks]") {
  for (SyntheticTask task : {SyntheticTask::kReverseDigits, SyntheticTask::kSortDigits}) {
    std::set<size_t> lengths;
    for (int64_t i = 0; i < 300; ++i) lengths.insert(generate_synthetic(task, {3, 6}, 2, i).answer.size());
    CHECK(lengths == std::set<size_t>{3, 4, 5, 6});
  }
  for (int64_t i = 0; i < 300; ++i) {
    const Prompt p = generate_synthetic(SyntheticTask::kAdd, {kMaxSyntheticDigits, kMaxSyntheticDigits}, 2, i);
    CHECK(p.text.size() == static_cast<size_t>(2 * kMaxSyntheticDigits + 2));
    CHECK(static_cast<int64_t>(p.answer.size()) <= kMaxSyntheticDigits + 1);
  }
}

TEST_CASE("synthetic options and names are validated", "[tasks]") {
  CHECK_THROWS_WITH(SyntheticSource(SyntheticTask::kAdd, {0, 3}, 1),
                    Catch::Contains("task add") && Catch::Contains("min_digits 0"));
  CHECK_THROWS_AS(SyntheticSource(SyntheticTask::kReverseDigits, {4, 3}, 1), UserError);
  CHECK_THROWS_AS(SyntheticSource(SyntheticTask::kSortDigits, {1, kMaxSyntheticDigits + 1}, 1), UserError);
  for (SyntheticTask task : {SyntheticTask::kReverseDigits, SyntheticTask::kSortDigits, SyntheticTask::kAdd,
                             SyntheticTask::kShapeCorners, SyntheticTask::kMultiply})
    CHECK(synthetic_task_from_name(synthetic_task_name(task)) == task);
  CHECK_FALSE(synthetic_task_from_name("jsonl"));
  CHECK_FALSE(synthetic_task_from_name("Add"));
}
