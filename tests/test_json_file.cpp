// read_json_object on real files: an object is read; a missing file, malformed JSON and a JSON
// value that is not an object are each a UserError naming the file (and the hint when given).
#include <catch2/catch.hpp>

#include "common/json_file.h"
#include "common/write_file.h"
#include "fixtures.h"

using namespace tandem;

TEST_CASE("read_json_object: an object, or a named error for a missing, malformed or non-object file", "[json_file]") {
  const test::TempDir tmp("tandem_json_file");
  const std::string dir = tmp.str();
  write_file_checked(dir + "/ok.json", R"({"a": 1, "b": [2]})");
  CHECK(read_json_object(dir + "/ok.json").at("a") == 1);
  CHECK_THROWS_WITH(read_json_object(dir + "/missing.json"), "cannot read " + dir + "/missing.json");
  write_file_checked(dir + "/bad.json", R"({"a": )");
  CHECK_THROWS_WITH(read_json_object(dir + "/bad.json", "export it again"),
                    dir + "/bad.json: not a JSON object; export it again");
  write_file_checked(dir + "/array.json", "[1, 2]");
  CHECK_THROWS_AS(read_json_object(dir + "/array.json"), UserError);
  CHECK_THROWS_WITH(read_json_object(dir + "/array.json"), Catch::Contains("array.json: not a JSON object"));
}
