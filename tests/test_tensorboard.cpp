// TensorBoard event files: CRC-32C test vectors, and a file read back by the independent
// Python reader (scripts/fixtures/read_tfevents.py) in the tensorboard.python_reads_cpp ctest.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/run/tensorboard.h"

using namespace tandem;

TEST_CASE("crc32c matches the Castagnoli test vectors", "[tensorboard]") {
  const std::string digits = "123456789";
  CHECK(crc32c(reinterpret_cast<const uint8_t*>(digits.data()), digits.size()) == 0xE3069283u);
  const std::vector<uint8_t> zeros(32, 0);
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
}

// Hidden ([.tbwriter]): writes an event file to $TANDEM_TB_OUT for the Python reader.
TEST_CASE("write an event file for the python reader", "[.tbwriter]") {
  const char* dir = std::getenv("TANDEM_TB_OUT");
  REQUIRE(dir != nullptr);
  TensorBoardWriter w(dir);
  w.add_scalars(1, {{"reward/mean", 0.25}, {"loss", -1.5}}, 1000.0);
  w.add_scalars(2, {{"reward/mean", 0.75}}, 1001.0);
  w.flush();
  std::ofstream(std::string(dir) + "/path.txt") << w.path();
}
