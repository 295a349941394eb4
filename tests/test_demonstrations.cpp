// Warm-start demonstrations with the real Qwen2.5 tokenizer and template: a demonstrated
// conversation is laid out as the episode it shows (the template's own rendering of the whole
// conversation, tool calls included), only its model turns are trained, and malformed files are
// refused naming the line and the fix. The shipped calculator demonstrations are correct.
#include <catch2/catch.hpp>

#include "chat_fixtures.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>

#include "common/error.h"
#include "core/env/arithmetic.h"
#include "core/env/builtin_envs.h"
#include "core/env/demonstrations.h"
#include "core/env/tool_calls.h"

using namespace tandem;
using namespace tandem::env;
using ojson = nlohmann::ordered_json;

namespace {

std::string write_lines(const test::TempDir& dir, const std::string& name, const std::vector<std::string>& lines) {
  const std::string path = dir.file(name);
  std::ofstream out(path);
  for (const auto& l : lines) out << l << "\n";
  return path;
}

ojson calc_conversation(bool structured) {
  ojson call = {{"type", "function"}, {"function", {{"name", "calc"}, {"arguments", {{"expression", "713 * 11"}}}}}};
  ojson turn = structured ? ojson{{"role", "assistant"}, {"content", ""}, {"tool_calls", ojson::array({call})}}
                          : ojson{{"role", "assistant"},
                                  {"content",
                                   "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"713 * "
                                   "11\"}}\n</tool_call>"}};
  return ojson::array({ojson{{"role", "user"}, {"content", "What is 713 * 11?"}}, turn,
                       ojson{{"role", "tool"}, {"content", "7843"}},
                       ojson{{"role", "assistant"}, {"content", "The answer is 7843."}}});
}

}  // namespace

TEST_CASE("a demonstration is laid out as its episode; only the model turns are trained", "[env][demonstrations]") {
  test::RealChat q;
  if (!test::load_real_chat("qwen2_5", q)) {
    WARN("skipping: the real Qwen2.5 tokenizer is not in " << test::real_tokenizer_dir("qwen2_5"));
    return;
  }
  InProcessEnv env(make_builtin_env("calculator"));
  const ConversationFormat format{q.chat_template.get(), q.tokenizer.get(), env.hello().tools, nlohmann::json::object(),
                                  "qwen2_5"};
  const ojson text_form = calc_conversation(false), structured = calc_conversation(true);
  // OpenAI's tool_calls become the hermes text the template itself renders for them.
  CHECK(assistant_text(structured[1]) == text_form[1]["content"].get<std::string>());
  // Arguments that are not an object (as such or as a JSON string) are refused, not written as a call.
  for (const ojson& args : {ojson(5), ojson::array({1}), ojson("[1]")}) {
    ojson bad = structured[1];
    bad["tool_calls"][0]["function"]["arguments"] = args;
    CHECK_THAT(test::user_error_of([&] { assistant_text(bad); }),
               Catch::Contains("needs \"arguments\" that are a JSON object"));
  }

  const ArSample s = demonstration_sample(format, structured, q.end_of_turn, std::nullopt, 4096, "demo");
  // The whole sequence is the template's rendering of the conversation (tool calls rendered by the
  // template from the structured form), and the prompt is its first user turn with the generation
  // prompt.
  CHECK(q.tokenizer->decode(s.tokens) == format.render(structured, false));
  const ojson first = ojson::array({structured[0]});
  CHECK(q.tokenizer->decode({s.tokens.begin(), s.tokens.begin() + s.prompt_len}) == format.render(first, true));
  // Trained: each assistant turn's text and the <|im_end|> that ends it, nothing else.
  REQUIRE(static_cast<int64_t>(s.response_mask.size()) == s.response_len());
  std::vector<int64_t> trained;
  std::vector<std::string> spans;
  bool in_span = false;
  for (size_t t = 0; t < s.response_mask.size(); ++t) {
    const int64_t id = s.tokens[static_cast<size_t>(s.prompt_len) + t];
    if (s.response_mask[t]) {
      if (!in_span) spans.emplace_back();
      spans.back() += q.tokenizer->decode({id});
    }
    in_span = s.response_mask[t] != 0;
  }
  REQUIRE(spans.size() == 2);
  CHECK(spans[0] == text_form[1]["content"].get<std::string>() + "<|im_end|>");
  CHECK(spans[1] == "The answer is 7843.<|im_end|>");
  // The tool's answer is there, untrained (the control: it is in the sequence at all).
  CHECK(format.render(structured, false).find("<tool_response>\n7843\n</tool_response>") != std::string::npos);

  // A system prompt opens a conversation that has none, as it opens episodes.
  const ArSample with_system = demonstration_sample(format, text_form, q.end_of_turn, "Be brief.", 4096, "demo");
  ojson expected = ojson::array({ojson{{"role", "system"}, {"content", "Be brief."}}});
  for (const auto& m : text_form) expected.push_back(m);
  CHECK(q.tokenizer->decode(with_system.tokens) == format.render(expected, false));
  CHECK(with_system.action_tokens() == s.action_tokens());

  // Longer than the episode cap: refused, naming it.
  CHECK_THAT(test::user_error_of([&] {
               demonstration_sample(format, text_form, q.end_of_turn, std::nullopt, s.length() - 3, "demo 7");
             }),
             Catch::Contains("demo 7 is longer than the episode cap") && Catch::Contains("max_tokens"));
}

TEST_CASE("malformed demonstration files are refused naming the line and the fix", "[env][demonstrations]") {
  const test::TempDir dir("demos");
  const std::string ok = R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "5"}]})";
  CHECK(read_demonstrations(write_lines(dir, "ok.jsonl", {ok, "", ok})).size() == 2);
  const std::vector<std::pair<std::string, std::string>> bad{
      {"{not json", "line 2 is not JSON"},
      {R"({"conversation": []})", "line 2: expected an object with a \"messages\" array"},
      {R"({"messages": [{"role": "assistant", "content": "5"}]})", "an assistant message before any prompt"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
           {"role": "assistant", "content": "c"}]})",
       "follows another assistant message"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
           {"role": "tool", "content": "c"}]})",
       "ends with a tool message"},
      {R"({"messages": [{"role": "user", "content": "a"}]})", "has no assistant message"},
      {R"({"messages": [{"role": "robot", "content": "a"}, {"role": "assistant", "content": "b"}]})",
       "has role 'robot'"},
      {R"({"messages": [{"role": "user"}, {"role": "assistant", "content": "b"}]})", "needs a string \"content\""},
  };
  for (const auto& [line, message] : bad) {
    std::string one_line = line;
    one_line.erase(std::remove(one_line.begin(), one_line.end(), '\n'), one_line.end());
    const std::string path = write_lines(dir, "bad.jsonl", {ok, one_line});
    CHECK_THAT(test::user_error_of([&] { read_demonstrations(path); }),
               Catch::Contains(message) && Catch::Contains("bad.jsonl line 2"));
  }
  CHECK_THAT(test::user_error_of([&] { read_demonstrations(write_lines(dir, "empty.jsonl", {""})); }),
             Catch::Contains("holds no conversation"));
  CHECK_THAT(test::user_error_of([&] { read_demonstrations("/nonexistent/demos.jsonl"); }),
             Catch::Contains("cannot open '/nonexistent/demos.jsonl'"));
}

TEST_CASE("the calculator demonstrations call calc on the question's product and answer its result, or decline",
          "[env][demonstrations]") {
  const auto demos = read_demonstrations(std::string(TANDEM_CONFIGS_DIR) + "/data/tool_calc_demos.jsonl");
  REQUIRE(demos.size() == 1024);
  InProcessEnv env(make_builtin_env("calculator"));
  int k = 0, declined = 0;
  for (const auto& m : demos) {
    const std::string episode = "d" + std::to_string(k++);
    const std::string question = m[0]["content"];
    const std::string expression = question.substr(8, question.size() - 9);  // "What is " ... "?"
    const int64_t product = std::stoll(evaluate_arithmetic(expression));
    CHECK(product >= 100000);  // six digits: scripts/make_tool_demos.py says why
    env.reset(episode, nlohmann::json{{"prompt", question}, {"answer", std::to_string(product)}}, 0);
    if (m.size() == 2) {
      // A declining demonstration: the calculator environment scores a turn without a tool call
      // that does not hold the product 0, and ends the episode.
      ++declined;
      StepInput decline;
      decline.text = assistant_text(m[1]);
      CHECK(decline.text == "I cannot work that out without a calculator.");
      env.step(episode, decline);
      const auto events = env.poll(std::chrono::milliseconds(0));
      REQUIRE(events.size() == 2);
      CHECK(events[1].answer.done);
      CHECK(events[1].answer.reward == 0.0);
      continue;
    }
    REQUIRE(m.size() == 4);
    // The calculator environment, played the demonstration, answers its tool call with the tool
    // message shown and scores its answer 1.
    StepInput call;
    call.text = assistant_text(m[1]);
    ParsedToolCalls parsed = parse_tool_calls(call.text);
    REQUIRE(!parsed.error);
    REQUIRE(parsed.calls.size() == 1);
    CHECK(parsed.calls[0].arguments["expression"] == expression);
    call.tool_calls = parsed.calls;
    env.step(episode, call);
    StepInput answer;
    answer.text = m[3]["content"];
    env.step(episode, answer);
    const auto events = env.poll(std::chrono::milliseconds(0));
    REQUIRE(events.size() == 3);
    REQUIRE(events[1].answer.messages.size() == 1);
    CHECK(events[1].answer.messages[0]["content"] == m[2]["content"]);
    CHECK(events[2].answer.done);
    CHECK(events[2].answer.reward == 1.0);
  }
  CHECK(declined == 256);  // one in four
}

TEST_CASE("the calculator demo's held-out prompts are in neither its training prompts nor its demonstrations",
          "[env][demonstrations]") {
  const std::string dir = std::string(TANDEM_CONFIGS_DIR) + "/data/";
  const auto questions = [&](const std::string& file) {
    std::set<std::string> out;
    std::ifstream in(dir + file);
    for (std::string line; std::getline(in, line);) {
      const auto row = nlohmann::json::parse(line);
      const std::string q = row.contains("messages") ? row["messages"][0]["content"] : row["prompt"];
      if (row.contains("answer")) CHECK(row["answer"] == evaluate_arithmetic(q.substr(8, q.size() - 9)));
      out.insert(q);
    }
    return out;
  };
  const auto heldout = questions("tool_calc_heldout.jsonl");
  const auto prompts = questions("tool_calc_prompts.jsonl");
  const auto demos = questions("tool_calc_demos.jsonl");
  REQUIRE(heldout.size() == 64);
  REQUIRE(prompts.size() == 2048);
  for (const std::string& q : heldout) CHECK((!prompts.count(q) && !demos.count(q)));
}
