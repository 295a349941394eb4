// The calculator's arithmetic: exact integers, precedence, parentheses, decimals, and each error
// naming its position.
#include <catch2/catch.hpp>

#include "fixtures.h"

#include "common/error.h"
#include "core/env/arithmetic.h"

using namespace tandem;
using namespace tandem::env;

TEST_CASE("arithmetic: exact integers, precedence, parentheses, decimals", "[env][arithmetic]") {
  CHECK(evaluate_arithmetic("347 * 29") == "10063");
  CHECK(evaluate_arithmetic("2 + 3 * 4") == "14");
  CHECK(evaluate_arithmetic("(2 + 3) * 4") == "20");
  CHECK(evaluate_arithmetic("-(7 - 10)") == "3");
  CHECK(evaluate_arithmetic("123456789 * 987654321") == "121932631112635269");
  CHECK(evaluate_arithmetic("84 / 4") == "21");
  CHECK(evaluate_arithmetic("7 / 2") == "3.5");
  CHECK(evaluate_arithmetic("1.5 * 4") == "6");
  CHECK(evaluate_arithmetic("10 - 2 - 3") == "5");  // left-associative
  // INT64_MIN (reached without overflow) over -1: the quotient leaves int64, so it is a real; the
  // remainder test that picks the exact path must not run first (INT64_MIN % -1 traps on x86).
  CHECK(evaluate_arithmetic("-4294967296 * 2147483648 / -1") == evaluate_arithmetic("9223372036854775808.0"));
  CHECK(evaluate_arithmetic("-4294967296 * 2147483648 / 2") == "-4611686018427387904");
}

TEST_CASE("arithmetic errors name what and where", "[env][arithmetic]") {
  CHECK(test::user_error_of([] { evaluate_arithmetic("3 + * 2"); }) == "expected a number at 4 in '3 + * 2'");
  CHECK(test::user_error_of([] { evaluate_arithmetic("1 / 0"); }) == "division by zero at 5 in '1 / 0'");
  CHECK(test::user_error_of([] { evaluate_arithmetic("999999999999 * 999999999999"); }) ==
        "integer overflow at 27 in '999999999999 * 999999999999'");
  CHECK(test::user_error_of([] { evaluate_arithmetic("(1 + 2"); }) == "expected ')' at 6 in '(1 + 2'");
  CHECK(test::user_error_of([] { evaluate_arithmetic("import os"); }) == "expected a number at 0 in 'import os'");
  CHECK(test::user_error_of([] { evaluate_arithmetic("2 3"); }) == "unexpected '3' at 2 in '2 3'");
  // A character of several bytes is named whole (the message goes into the conversation, which is
  // tokenised: one byte of it would be invalid UTF-8 and fail the episode).
  CHECK(test::user_error_of([] { evaluate_arithmetic("3 \u00d7 4"); }) == "unexpected '\u00d7' at 2 in '3 \u00d7 4'");
  CHECK(test::user_error_of([] { evaluate_arithmetic("7 \u4e58"); }) == "unexpected '\u4e58' at 2 in '7 \u4e58'");
}
