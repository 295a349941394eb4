// The jsonl prompt dataset (strict loading, file:line errors) and the prompt-source factory.
#include <catch2/catch.hpp>

#include "fixtures.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "core/config/config.h"
#include "core/tasks/jsonl_dataset.h"
#include "core/tasks/task_factory.h"

using namespace tandem;
using namespace tandem::tasks;
namespace fs = std::filesystem;

namespace {

// A private directory per test case (test::TempDir) with a file writer.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("tandem_jsonl") {}
  const fs::path path{str()};
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return (path / name).string();
  }
};

std::string load_error(const std::string& path, const std::string& answer_key = "answer") {
  try {
    load_jsonl_prompts(path, "prompt", answer_key);
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("a good JSONL file loads every record with its line as id", "[tasks]") {
  TempDir dir;
  const std::string path = dir.write("good.jsonl",
                                     "{\"prompt\": \"12+7=\", \"answer\": \"19\"}\n"
                                     "\n"
                                     "{\"answer\": \"#### 42\", \"prompt\": \"q \\u00e9\", \"extra\": [1, 2]}\r\n"
                                     "  {\"prompt\": \"\", \"answer\": \"x\"}  \n"
                                     "{\"prompt\": \"last\", \"answer\": \"no newline\"}");
  const auto prompts = load_jsonl_prompts(path, "prompt", "answer");
  REQUIRE(prompts.size() == 4);
  CHECK(prompts[0].text == "12+7=");
  CHECK(prompts[0].answer == "19");
  CHECK(prompts[0].id == 0);
  CHECK(prompts[1].text == "q \xc3\xa9");
  CHECK(prompts[1].answer == "#### 42");
  CHECK(prompts[1].id == 2);  // the blank line 2 is skipped
  CHECK(prompts[2].text.empty());
  CHECK(prompts[3].id == 4);
  CHECK(prompts[3].answer == "no newline");
}

TEST_CASE("custom keys and records without answers", "[tasks]") {
  TempDir dir;
  const std::string path = dir.write("k.jsonl", "{\"question\": \"q1\", \"solution\": \"s1\"}\n");
  const auto prompts = load_jsonl_prompts(path, "question", "solution");
  REQUIRE(prompts.size() == 1);
  CHECK(prompts[0].text == "q1");
  CHECK(prompts[0].answer == "s1");
  CHECK(load_jsonl_prompts(path, "question", "")[0].answer.empty());
  CHECK_THAT(load_error(path), Catch::Contains("k.jsonl:1: missing key 'prompt'"));
}

TEST_CASE("bad JSONL records are named by file, line and key", "[tasks]") {
  TempDir dir;
  const std::string ok = "{\"prompt\": \"p\", \"answer\": \"a\"}\n";
  CHECK_THAT(load_error(dir.write("a.jsonl", ok + ok + "{\"prompt\": \"p\", \"answer\": \n")),
             Catch::Contains("a.jsonl:3: not valid JSON"));
  CHECK_THAT(load_error(dir.write("b.jsonl", ok + "{\"prompt\": \"p\"}\n")),
             Catch::Contains("b.jsonl:2: missing key 'answer'"));
  CHECK_THAT(load_error(dir.write("c.jsonl", "{\"prompt\": 5, \"answer\": \"a\"}\n")),
             Catch::Contains("c.jsonl:1: key 'prompt' must be a string, got number"));
  CHECK_THAT(load_error(dir.write("d.jsonl", ok + "{\"prompt\": \"p\", \"answer\": null}\n")),
             Catch::Contains("d.jsonl:2: key 'answer' must be a string, got null"));
  CHECK_THAT(load_error(dir.write("e.jsonl", "[\"prompt\", \"answer\"]\n")),
             Catch::Contains("e.jsonl:1: expected a JSON object, got array"));
  CHECK_THAT(load_error(dir.write("f.jsonl", ok + "{\"prompt\": \"p\", \"answer\": \"a\"} trailing\n")),
             Catch::Contains("f.jsonl:2: not valid JSON"));
}

TEST_CASE("an empty, missing or directory dataset is an error", "[tasks]") {
  TempDir dir;
  CHECK_THAT(load_error(dir.write("empty.jsonl", "")), Catch::Contains("empty.jsonl: the prompt dataset is empty"));
  CHECK_THAT(load_error(dir.write("blank.jsonl", "\n  \n\n")), Catch::Contains("is empty"));
  CHECK_THAT(load_error((dir.path / "missing.jsonl").string()),
             Catch::Contains("missing.jsonl: the prompt dataset does not exist"));
  CHECK_THAT(load_error(dir.path.string()), Catch::Contains("is a directory"));
}

TEST_CASE("make_prompt_source builds every built-in task name", "[tasks]") {
  TempDir dir;
  const std::string path = dir.write("d.jsonl",
                                     "{\"prompt\": \"p0\", \"answer\": \"a0\"}\n"
                                     "{\"prompt\": \"p1\", \"answer\": \"a1\"}\n");
  for (const std::string& name : ar_task_names()) {
    const auto source = make_prompt_source(name, path, "prompt", "answer", true, 1);
    REQUIRE(source);
    CHECK_NOTHROW(source->next());
  }
  const auto jsonl = make_prompt_source("jsonl", path, "prompt", "answer", false, 1);
  CHECK(*jsonl->size() == 2);
  CHECK(jsonl->next().text == "p0");
  CHECK(jsonl->describe() == "jsonl " + path);
  CHECK_FALSE(make_prompt_source("add", std::nullopt, "prompt", "answer", true, 1)->size());
  const auto hard =
      make_prompt_source("reverse_digits", std::nullopt, "prompt", "answer", true, 1, SyntheticOptions{7, 7});
  CHECK(hard->next().answer.size() == 7);
}

TEST_CASE("make_prompt_source names what is wrong", "[tasks]") {
  CHECK_THROWS_WITH(
      make_prompt_source("revrse_digits", std::nullopt, "prompt", "answer", true, 1),
      Catch::Contains("unknown AR task 'revrse_digits'") && Catch::Contains("did you mean reverse_digits?"));
  CHECK_THROWS_WITH(make_prompt_source("gsm8k", std::nullopt, "prompt", "answer", true, 1),
                    Catch::Contains("reverse_digits|sort_digits|add|shape_corners|multiply|jsonl"));
  CHECK_THROWS_WITH(make_prompt_source("jsonl", std::nullopt, "prompt", "answer", true, 1),
                    Catch::Contains("data.path is required"));
  CHECK_THROWS_AS(make_prompt_source("jsonl", std::string("/nonexistent/x.jsonl"), "prompt", "answer", true, 1),
                  UserError);
}
