// Prompt streams: the data cursor's JSON round trip and exact resume, per-epoch shuffling of a
// finite dataset, and dp sharding that is disjoint, covering and independent of the dp size.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "common/error.h"
#include "core/tasks/dataset_source.h"
#include "core/tasks/prompt_source.h"
#include "core/tasks/synthetic.h"

using namespace tandem;
using namespace tandem::tasks;

namespace {

std::vector<Prompt> numbered_prompts(int64_t n) {
  std::vector<Prompt> prompts;
  for (int64_t i = 0; i < n; ++i) prompts.push_back({"p" + std::to_string(i), "a" + std::to_string(i), i});
  return prompts;
}

std::vector<std::string> texts(PromptSource& source, int64_t count) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(source.next().text);
  return out;
}

std::string error_of(const nlohmann::json& j) {
  try {
    cursor_from_json(j);
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("the data cursor round-trips through JSON and rejects damaged fields", "[tasks]") {
  const DataCursor c{3, 17, -5};
  const nlohmann::json j = c;
  CHECK(j == nlohmann::json::parse(R"({"epoch": 3, "position": 17, "seed": -5})"));
  CHECK(cursor_from_json(j) == c);
  CHECK(j.get<DataCursor>() == c);
  CHECK(cursor_from_json(nlohmann::json::parse(j.dump())) == c);

  CHECK_THAT(error_of(nlohmann::json::parse(R"({"epoch": 0, "seed": 1})")),
             Catch::Contains("missing field 'position'"));
  CHECK_THAT(error_of(nlohmann::json::parse(R"({"epoch": 0, "position": 1.5, "seed": 1})")),
             Catch::Contains("'position' must be an integer"));
  CHECK_THAT(error_of(nlohmann::json::parse(R"({"epoch": -1, "position": 0, "seed": 1})")),
             Catch::Contains("'epoch' must be >= 0"));
  CHECK_THAT(error_of(nlohmann::json::parse("[1, 2, 3]")), Catch::Contains("expected a JSON object"));
}

TEST_CASE("a restored cursor continues a generator exactly", "[tasks]") {
  SyntheticSource a(SyntheticTask::kAdd, default_synthetic_options(SyntheticTask::kAdd), 11);
  texts(a, 13);
  const nlohmann::json saved = a.cursor();
  const auto expected = texts(a, 40);

  SyntheticSource b(SyntheticTask::kAdd, default_synthetic_options(SyntheticTask::kAdd), 999);  // other seed
  b.restore(cursor_from_json(saved));
  CHECK(texts(b, 40) == expected);
  CHECK(b.cursor() == a.cursor());
}

TEST_CASE("a restored cursor continues a shuffled dataset exactly, across epochs", "[tasks]") {
  for (const int64_t taken : {0, 1, 6, 7, 8, 19}) {
    DatasetSource a(numbered_prompts(7), true, 5, "test");
    texts(a, taken);
    const nlohmann::json saved = a.cursor();
    const auto expected = texts(a, 30);  // more than four epochs

    DatasetSource b(numbered_prompts(7), true, 42, "test");
    texts(b, 3);  // wherever it stood before
    b.restore(cursor_from_json(saved));
    CHECK(texts(b, 30) == expected);
    CHECK(b.cursor() == a.cursor());
  }
}

TEST_CASE("a dataset epoch visits every prompt once, in a (seed, epoch) order", "[tasks]") {
  const int64_t n = 50;
  DatasetSource source(numbered_prompts(n), true, 3, "test");
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < n; ++i) ids.push_back(source.next().id);
    epochs.push_back(ids);
    std::vector<int64_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) CHECK(sorted[static_cast<size_t>(i)] == i);
    CHECK(ids == epoch_permutation(n, 3, e));
  }
  CHECK(epochs[0] != epochs[1]);
  CHECK(epochs[1] != epochs[2]);
  CHECK(source.cursor() == DataCursor{2, n, 3});
  CHECK(epoch_permutation(n, 4, 0) != epochs[0]);

  // Pinned: the order is part of what a checkpoint promises, on every platform.
  CHECK(epoch_permutation(8, 1, 0) == std::vector<int64_t>{0, 2, 5, 4, 3, 1, 7, 6});
}

TEST_CASE("an unshuffled dataset keeps file order and wraps into the next epoch", "[tasks]") {
  DatasetSource source(numbered_prompts(3), false, 1, "test");
  CHECK(texts(source, 7) == std::vector<std::string>{"p0", "p1", "p2", "p0", "p1", "p2", "p0"});
  CHECK(source.cursor() == DataCursor{2, 1, 1});
  CHECK(*source.size() == 3);
}

TEST_CASE("a dataset rejects a cursor past its end and an empty prompt list", "[tasks]") {
  DatasetSource source(numbered_prompts(3), true, 1, "jsonl x.jsonl");
  CHECK_NOTHROW(source.restore({0, 3, 1}));
  CHECK_THROWS_WITH(source.restore({0, 4, 1}), Catch::Contains("jsonl x.jsonl") && Catch::Contains("past the end"));
  CHECK_THROWS_AS(DatasetSource({}, true, 1, "empty"), UserError);
}

TEST_CASE("sharding is disjoint, covering and leaves the global sequence independent of dp", "[tasks]") {
  const int64_t steps = 4;
  for (const int64_t per_step : {1, 7, 8, 12}) {
    // dp = 1 defines the global sequence.
    DatasetSource reference(numbered_prompts(10), true, 9, "ref");
    std::vector<std::vector<Prompt>> global;
    for (int64_t s = 0; s < steps; ++s) global.push_back(next_step(reference, per_step));

    for (const int64_t world : {1, 2, 3, 4, 8}) {
      std::vector<std::unique_ptr<DatasetSource>> ranks;
      for (int64_t r = 0; r < world; ++r)
        ranks.push_back(std::make_unique<DatasetSource>(numbered_prompts(10), true, 9, "rank"));
      for (int64_t s = 0; s < steps; ++s) {
        std::set<int64_t> seen;
        for (int64_t r = 0; r < world; ++r) {
          for (const ShardPrompt& sp : next_step_shard(*ranks[static_cast<size_t>(r)], per_step, r, world)) {
            CHECK(sp.slot % world == r);
            CHECK(seen.insert(sp.slot).second);  // disjoint
            CHECK(sp.prompt.id == global[static_cast<size_t>(s)][static_cast<size_t>(sp.slot)].id);
          }
        }
        CHECK(static_cast<int64_t>(seen.size()) == per_step);  // covering
      }
      for (const auto& rank : ranks) CHECK(rank->cursor() == reference.cursor());  // one cursor for all
    }
  }
}

TEST_CASE("shard_slots is round robin and rejects a bad rank", "[tasks]") {
  CHECK(shard_slots(8, 1, 3) == std::vector<int64_t>{1, 4, 7});
  CHECK(shard_slots(2, 3, 4).empty());
  CHECK_THROWS_AS(shard_slots(8, 3, 3), std::invalid_argument);
  CHECK_THROWS_AS(shard_slots(8, 0, 0), std::invalid_argument);
}
