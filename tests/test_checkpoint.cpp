// Checkpoint atomicity, discovery, pruning and --resume resolution.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/checkpoint.h"
#include "core/error.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {
std::string fresh_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("tandem_ckpt_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}
void save(const CheckpointDir& c, int64_t step) {
  const std::string d = c.begin(step);
  std::ofstream(d + "/state.json") << "{\"step\": " << step << "}\n";
  c.commit(step);
}
}  // namespace

TEST_CASE("commit makes a checkpoint visible only when complete; latest follows", "[checkpoint]") {
  const std::string run = fresh_dir("commit");
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
  CHECK(fs::path(*CheckpointDir::resolve(run, "auto")).filename() == "step_000020");
  // The next attempt at the same step starts from a clean staging directory.
  const std::string again = c.begin(30);
  CHECK(fs::is_empty(again));
  fs::remove_all(run);
}

TEST_CASE("keep_last prunes the oldest committed checkpoints", "[checkpoint]") {
  const std::string run = fresh_dir("prune");
  CheckpointDir c(run, 2);
  for (int64_t s : {1, 2, 3, 4}) save(c, s);
  CHECK(c.committed_steps() == std::vector<int64_t>{3, 4});
  fs::remove_all(run);
}

TEST_CASE("latest falls back to the newest complete checkpoint when the pointer is stale", "[checkpoint]") {
  const std::string run = fresh_dir("stale");
  CheckpointDir c(run, 0);
  save(c, 5);
  save(c, 6);
  fs::remove_all(fs::path(run) / "checkpoints" / "step_000006");
  CHECK(fs::path(*c.latest()).filename() == "step_000005");
  fs::remove_all(run);
}

TEST_CASE("resume resolution", "[checkpoint]") {
  const std::string run = fresh_dir("resolve");
  CHECK_FALSE(CheckpointDir::resolve(run, "auto").has_value());  // fresh start
  CHECK_FALSE(CheckpointDir::resolve(run, "").has_value());
  CHECK_THROWS_WITH(CheckpointDir::resolve(run, run + "/nope"), Catch::Contains("no such checkpoint"));
  fs::create_directories(run + "/half");
  CHECK_THROWS_WITH(CheckpointDir::resolve(run, run + "/half"), Catch::Contains("incomplete checkpoint"));
  CheckpointDir c(run, 0);
  save(c, 3);
  CHECK(CheckpointDir::resolve(run, run + "/checkpoints/step_000003").has_value());
  fs::remove_all(run);
}
