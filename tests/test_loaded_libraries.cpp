// The loader's list: LibTorch's c10 is mapped in this test binary; a made-up name is not.
#include <catch2/catch.hpp>

#include "runtime/loaded_libraries.h"

using namespace tandem;

TEST_CASE("loaded_libraries finds what the loader mapped, by file-name prefix", "[runtime]") {
  const auto c10 = loaded_libraries("libc10.so");
  REQUIRE(c10.size() == 1);
  CHECK(c10[0].find("/torch/lib/libc10.so") != std::string::npos);
  CHECK(loaded_libraries("libtandem_no_such_library").empty());
  CHECK(loaded_libraries("c10.so").empty());  // a prefix of the file name, not a substring
}
