// common/write_file.h: every write checked, and the atomic form leaves the old file or the new one.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/write_file.h"
#include "fixtures.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {
std::string read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
}  // namespace

TEST_CASE("side files are written checked: a full disk is a named error, not a truncated file", "[write_file]") {
  // /dev/full takes the open and fails every write with ENOSPC, as a full file system does.
  CHECK_THROWS_AS(write_file_checked("/dev/full", std::string(100000, 'x')), UserError);
  CHECK_THROWS_WITH(write_file_checked("/dev/full", "12\n"), Catch::Contains("cannot write /dev/full (disk full?"));
  const test::TempDir tmp("tandem_write_checked");
  const std::string dir = tmp.str();
  CHECK_THROWS_WITH(write_file_checked(dir + "/missing/state.json", "{}\n"),
                    Catch::Contains("cannot write " + dir + "/missing/state.json"));
  write_file_checked(dir + "/state.json", "{}\n");  // control
  CHECK(read(dir + "/state.json") == "{}\n");
}

TEST_CASE("an atomic write replaces the whole file or, failing, leaves the old one", "[write_file]") {
  const test::TempDir tmp("tandem_write_atomic");
  const std::string dir = tmp.str();
  const std::string path = dir + "/config.json";
  write_file_atomically(path, "old\n");
  write_file_atomically(path, "new\n");
  CHECK(read(path) == "new\n");
  CHECK_FALSE(fs::exists(path + ".tmp"));
  // The temporary's place is taken by a directory: the write fails and the file keeps its text.
  fs::create_directories(path + ".tmp");
  CHECK_THROWS_WITH(write_file_atomically(path, "newer\n"), Catch::Contains("cannot write " + path + ".tmp"));
  CHECK(read(path) == "new\n");
}
