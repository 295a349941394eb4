// Built-in AR rewards on hand-made cases: exact_match, partial_match (formula), math_answer
// (GSM8K "####" answers, thousands separators) and the reward factory's names.
#include <catch2/catch.hpp>

#include "common/error.h"
#include "core/config/config.h"
#include "core/rewards/math_answer.h"
#include "core/rewards/reward_factory.h"
#include "core/rewards/text_match.h"

using namespace tandem;
using namespace tandem::rewards;

TEST_CASE("exact_match compares the trimmed response up to an end marker", "[rewards]") {
  CHECK(exact_match_score("321", "321") == 1.0);
  CHECK(exact_match_score("  321\n", " 321 ") == 1.0);
  CHECK(exact_match_score("321<eos>", "321") == 1.0);
  CHECK(exact_match_score("321<eos>999<eos>", "321") == 1.0);
  CHECK(exact_match_score("321 <|im_end|>\n", "321") == 1.0);
  CHECK(exact_match_score("3210", "321") == 0.0);
  CHECK(exact_match_score("32", "321") == 0.0);
  CHECK(exact_match_score("3 21", "321") == 0.0);  // inner whitespace counts
  CHECK(exact_match_score("<eos>321", "321") == 0.0);
  CHECK(exact_match_score("", "") == 1.0);
  CHECK(normalize_response(" ab </s> cd") == "ab");
}

TEST_CASE("partial_match is position agreement over the longer length", "[rewards]") {
  CHECK(partial_match_score("321", "321") == 1.0);
  CHECK(partial_match_score("321<eos>", " 321") == 1.0);
  CHECK(partial_match_score("32", "321") == Approx(2.0 / 3));    // one missing
  CHECK(partial_match_score("3210", "321") == Approx(3.0 / 4));  // one extra
  CHECK(partial_match_score("123", "321") == Approx(1.0 / 3));   // only the middle matches
  CHECK(partial_match_score("021", "321") == Approx(2.0 / 3));
  CHECK(partial_match_score("", "321") == 0.0);
  CHECK(partial_match_score("abc", "") == 0.0);
  CHECK(partial_match_score("", "") == 1.0);
  CHECK(partial_match_score("999999", "9") == Approx(1.0 / 6));
  CHECK(partial_match_score("\xc3\xa9x", "\xc3\xa9y") == Approx(0.5));  // code points, not bytes
  // Anything but the exact answer stays below 1.
  for (const char* r : {"32", "3211", "322", " 3 21", "321 1"}) CHECK(partial_match_score(r, "321") < 1.0);
}

TEST_CASE("number extraction handles signs, separators and decimals", "[rewards]") {
  using V = std::vector<std::string>;
  CHECK(find_numbers("5-3=2") == V{"5", "3", "2"});
  CHECK(find_numbers("x = -3 and y=-0.5") == V{"-3", "-0.5"});
  CHECK(find_numbers("$1,234,567.89 total") == V{"1234567.89"});
  CHECK(find_numbers("1,2,3") == V{"1", "2", "3"});
  CHECK(find_numbers("12,3456") == V{"12", "3456"});
  CHECK(find_numbers("it is 42.") == V{"42"});
  CHECK(find_numbers("no digits") == V{});
  CHECK(final_number("She has 3 apples. #### 1,000") == 1000.0);
  CHECK(final_number("#### 7 then 9") == 7.0);
  CHECK(final_number("a 1 b 2.5") == 2.5);
  CHECK_FALSE(final_number("#### none"));
  CHECK_FALSE(final_number(""));
  // Signs only where they are signs; a bare fraction; LaTeX's thousands separator.
  CHECK(find_numbers("-$5 off, COVID-19, \xE2\x88\x92"
                     "7") == V{"-5", "19", "-7"});
  CHECK(find_numbers("is .5 or 3.5") == V{"0.5", "3.5"});
  CHECK(find_numbers("\\boxed{1{,}000}") == V{"1000"});
  // A "####" heading followed by words is not the answer marker: the last number is.
  CHECK(final_number("#### Step 2: total\nShe pays 3 * 24 = 72 dollars.\nThe answer is 72.") == 72.0);
  CHECK(final_number("The answer is 72.\n####") == 72.0);
  CHECK(final_number("#### 72\n#### Check: done") == 72.0);  // the last marker that a number follows
  CHECK(final_number("####-$5") == -5.0);
}

TEST_CASE("math_answer's reference must hold one number after its marker", "[rewards]") {
  CHECK(math_reference_problem("Work: 48/2 = 24.\n#### 72").empty());
  CHECK(math_reference_problem("1,000").empty());
  CHECK(reference_number("#### 1,000") == 1000.0);
  // A fraction, a root or a time was read as its last number: "\frac{1}{2}" matched "\frac{3}{2}".
  for (const char* bad : {"\\frac{1}{2}", "2\\sqrt{3}", "3:00 pm", "#### 1/2"}) {
    INFO(bad);
    CHECK_THAT(math_reference_problem(bad), Catch::Contains("holds 2 numbers") && Catch::Contains("'#### N'"));
    CHECK_FALSE(reference_number(bad));
  }
  CHECK_THROWS_WITH(math_answer_score("\\boxed{\\frac{3}{2}}", "\\frac{1}{2}", 4),
                    Catch::Contains("sample 4") && Catch::Contains("holds 2 numbers"));
  CHECK(reference_problem("math_answer", "\\frac{1}{2}") ==
        "the reference answer holds 2 numbers where math_answer compares one (a fraction, a root or a time cannot "
        "be compared as one number): end it with '#### N'");
}

TEST_CASE("math_answer compares the final numbers of response and answer", "[rewards]") {
  const std::string gsm = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72";
  CHECK(math_answer_score("She sold 48 + 24 = 72 clips.", gsm, 0) == 1.0);
  CHECK(math_answer_score("48 + 24 = 72, so #### 72<eos>", gsm, 0) == 1.0);
  CHECK(math_answer_score("#### 72.0", gsm, 0) == 1.0);
  CHECK(math_answer_score("72 is wrong, it is 73", gsm, 0) == 0.0);
  CHECK(math_answer_score("#### 73 (not 72)", gsm, 0) == 0.0);
  CHECK(math_answer_score("I don't know", gsm, 0) == 0.0);
  CHECK(math_answer_score("72<eos> 99", gsm, 0) == 1.0);  // text after the end marker is ignored
  CHECK(math_answer_score("The total is $1,234.", "#### 1234", 0) == 1.0);
  CHECK(math_answer_score("1234", "#### 1,234", 0) == 1.0);
  CHECK(math_answer_score("-5", "#### -5", 0) == 1.0);
  CHECK(math_answer_score("0.50", "0.5", 0) == 1.0);  // a plain numeric answer
  CHECK(math_answer_score("19", "19", 0) == 1.0);
  CHECK_THROWS_WITH(math_answer_score("42", "#### forty-two", 17),
                    Catch::Contains("sample 17") && Catch::Contains("no number"));

  MathAnswerReward reward;
  const std::vector<RewardInput> inputs{{"q", "#### 72", gsm, 0}, {"q", "71", gsm, 1}, {"q", "1,000", "1000", 2}};
  CHECK(reward.score(inputs) == std::vector<double>{1.0, 0.0, 1.0});
}

TEST_CASE("make_reward builds every built-in name and explains bad ones", "[rewards]") {
  for (const std::string& name : ar_reward_names()) {
    const auto reward = make_reward(name, std::string("cat >/dev/null"), 5.0);
    REQUIRE(reward);
    CHECK(reward->name() == name);
  }
  const std::vector<RewardInput> inputs{{"12+7=", "19<eos>", "19", 0}, {"12+7=", "18", "19", 1}};
  CHECK(make_reward("exact_match", std::nullopt, 1)->score(inputs) == std::vector<double>{1.0, 0.0});
  const auto partial = make_reward("partial_match", std::nullopt, 1)->score(inputs);
  CHECK(partial[0] == 1.0);
  CHECK(partial[1] == Approx(0.5));
  CHECK(make_reward("exact_match", std::nullopt, 1)->score({}).empty());

  CHECK_THROWS_WITH(make_reward("exact_mach", std::nullopt, 1),
                    Catch::Contains("unknown AR reward 'exact_mach'") && Catch::Contains("did you mean exact_match?"));
  CHECK_THROWS_WITH(make_reward("bleu", std::nullopt, 1),
                    Catch::Contains("exact_match|partial_match|math_answer|command"));
  CHECK_THROWS_WITH(make_reward("command", std::nullopt, 1), Catch::Contains("reward.command is required"));
}
