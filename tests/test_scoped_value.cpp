// ScopedValue: a guard sets its switch for its scope and restores the previous value, nested and
// when the scope is left by an exception.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "common/scoped_value.h"

namespace {

thread_local int t_level = 0;

class LevelGuard : tandem::ScopedValue<int> {
 public:
  explicit LevelGuard(int level) : ScopedValue(t_level, level) {}
  int outer() const { return previous(); }
};

}  // namespace

TEST_CASE("a scoped value is set for its scope and restored after it, nested and on a throw", "[scoped_value]") {
  REQUIRE(t_level == 0);
  {
    LevelGuard a(3);
    CHECK(t_level == 3);
    CHECK(a.outer() == 0);
    {
      LevelGuard b(5);
      CHECK(t_level == 5);
      CHECK(b.outer() == 3);
    }
    CHECK(t_level == 3);
    CHECK_THROWS_AS(
        [] {
          LevelGuard c(7);
          throw std::runtime_error("leaves the scope");
        }(),
        std::runtime_error);
    CHECK(t_level == 3);
  }
  CHECK(t_level == 0);
}
