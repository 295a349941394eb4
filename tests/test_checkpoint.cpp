// Checkpoint atomicity, discovery, pruning and --resume resolution, including the walk back past
// damaged checkpoints.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/error.h"
#include "core/run/checkpoint.h"
#include "fixtures.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {
void save(const CheckpointDir& c, int64_t step) {
  const std::string d = c.begin(step);
  std::ofstream(d + "/state.json") << "{\"step\": " << step << "}\n";
  c.commit(step);
}
}  // namespace

TEST_CASE("commit makes a checkpoint visible only when complete; latest follows", "[checkpoint]") {
  const test::TempDir tmp("tandem_ckpt_commit");
  const std::string run = tmp.str();
  CheckpointDir c(run, 0);
  CHECK_FALSE(c.latest().has_value());
  save(c, 10);
  save(c, 20);
  REQUIRE(c.latest().has_value());
  CHECK(fs::path(*c.latest()).filename() == "step_000020");
  // A crash mid-write: staging exists, no commit. latest still names step 20.
  const std::string staging = c.begin(30);
  std::ofstream(staging + "/model.safetensors") << "partial";
  CHECK(fs::path(*c.latest()).filename() == "step_000020");
  CHECK(c.committed_steps() == std::vector<int64_t>{10, 20});
  CHECK(fs::path(*CheckpointDir::resolve(run, "auto").path).filename() == "step_000020");
  // The next attempt at the same step starts from a clean staging directory.
  const std::string again = c.begin(30);
  CHECK(fs::is_empty(again));
}

TEST_CASE("keep_last prunes the oldest committed checkpoints", "[checkpoint]") {
  const test::TempDir tmp("tandem_ckpt_prune");
  const std::string run = tmp.str();
  CheckpointDir c(run, 2);
  for (int64_t s : {1, 2, 3, 4}) save(c, s);
  CHECK(c.committed_steps() == std::vector<int64_t>{3, 4});
}

TEST_CASE("latest falls back to the newest complete checkpoint when the pointer is stale", "[checkpoint]") {
  const test::TempDir tmp("tandem_ckpt_stale");
  const std::string run = tmp.str();
  CheckpointDir c(run, 0);
  save(c, 5);
  save(c, 6);
  fs::remove_all(fs::path(run) / "checkpoints" / "step_000006");
  CHECK(fs::path(*c.latest()).filename() == "step_000005");
}

TEST_CASE("resume resolution", "[checkpoint]") {
  const test::TempDir tmp("tandem_ckpt_resolve");
  const std::string run = tmp.str();
  CHECK_FALSE(CheckpointDir::resolve(run, "auto").path.has_value());  // fresh start
  CHECK_FALSE(CheckpointDir::resolve(run, "").path.has_value());
  CHECK_THROWS_WITH(CheckpointDir::resolve(run, run + "/nope"), Catch::Contains("no such checkpoint"));
  fs::create_directories(run + "/half");
  CHECK_THROWS_WITH(CheckpointDir::resolve(run, run + "/half"), Catch::Contains("incomplete checkpoint"));
  CheckpointDir c(run, 0);
  save(c, 3);
  const auto choice = CheckpointDir::resolve(run, run + "/checkpoints/step_000003");
  CHECK(choice.path.has_value());
  CHECK(choice.warnings.empty());
}

namespace {
void damage(const std::string& run, int64_t step) {  // same size, other bytes
  std::ofstream(run + "/checkpoints/" + CheckpointDir::step_name(step) + "/state.json")
      << "{\"step\": " << step + 1 << "}\n";
}
}  // namespace

TEST_CASE("resume auto walks back past a damaged latest checkpoint, warning with the file's name", "[checkpoint]") {
  const test::TempDir tmp("tandem_ckpt_walkback");
  const std::string run = tmp.str();
  CheckpointDir c(run, 0);
  for (int64_t s : {10, 20, 30}) save(c, s);
  auto choice = CheckpointDir::resolve(run, "auto");
  CHECK(fs::path(*choice.path).filename() == "step_000030");  // control: intact, no warning
  CHECK(choice.warnings.empty());
  damage(run, 30);
  damage(run, 20);
  choice = CheckpointDir::resolve(run, "auto");
  CHECK(fs::path(*choice.path).filename() == "step_000010");
  REQUIRE(choice.warnings.size() == 2);
  CHECK_THAT(choice.warnings[0], Catch::StartsWith("skipping damaged checkpoint " + run +
                                                   "/checkpoints/step_000030 (state.json: contents changed") &&
                                     Catch::EndsWith("; using " + run + "/checkpoints/step_000010"));
  CHECK_THAT(choice.warnings[1], Catch::Contains("step_000020 (state.json"));
  // `latest` still names step 30; discovery alone does not verify.
  CHECK(fs::path(*c.latest()).filename() == "step_000030");
}

TEST_CASE("resume of a named damaged checkpoint, or with every checkpoint damaged, is refused", "[checkpoint]") {
  const test::TempDir tmp("tandem_ckpt_refuse");
  const std::string run = tmp.str();
  CheckpointDir c(run, 0);
  save(c, 1);
  save(c, 2);
  damage(run, 2);
  CHECK_THROWS_WITH(CheckpointDir::resolve(run, run + "/checkpoints/step_000002"),
                    Catch::Contains("damaged checkpoint: state.json: contents changed"));
  CHECK(CheckpointDir::resolve(run, run + "/checkpoints/step_000001").path.has_value());  // control
  // The errors name the flag the user gave: eval and generate take --checkpoint.
  CHECK_THROWS_WITH(CheckpointDir::resolve("", run + "/checkpoints/step_000002"),
                    Catch::StartsWith("--resume " + run) && Catch::Contains("or --resume auto"));
  CHECK_THROWS_WITH(CheckpointDir::resolve("", run + "/checkpoints/step_000002", "--checkpoint"),
                    Catch::StartsWith("--checkpoint " + run) && !Catch::Contains("--resume") &&
                        Catch::Contains("--checkpoint RUN_DIR (its newest intact checkpoint)"));
  CHECK_THROWS_WITH(CheckpointDir::resolve("", run + "/nowhere", "--checkpoint"),
                    Catch::Equals("--checkpoint " + run + "/nowhere: no such checkpoint directory"));
  damage(run, 1);
  CHECK_THROWS_WITH(CheckpointDir::resolve(run, "auto"),
                    Catch::StartsWith("no intact checkpoint in " + run + "/checkpoints, every one is damaged: ") &&
                        Catch::Contains("step_000002 (state.json") && Catch::Contains("step_000001 (state.json"));
}

TEST_CASE("a checkpoint without a manifest (an older tandem's) loads with a warning", "[checkpoint]") {
  const test::TempDir tmp("tandem_ckpt_nomanifest");
  const std::string run = tmp.str();
  CheckpointDir c(run, 0);
  save(c, 4);
  save(c, 5);
  fs::remove(run + "/checkpoints/step_000005/MANIFEST.json");
  const auto choice = CheckpointDir::resolve(run, "auto");
  CHECK(fs::path(*choice.path).filename() == "step_000005");
  REQUIRE(choice.warnings.size() == 1);
  CHECK_THAT(choice.warnings[0], Catch::Contains("step_000005: loading without verification: no MANIFEST.json"));
  const auto named = CheckpointDir::resolve(run, run + "/checkpoints/step_000005");
  CHECK(named.warnings.size() == 1);
}
