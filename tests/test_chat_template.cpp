// Chat templates and the Jinja interpreter under them: real model templates (Qwen2.5, Qwen3,
// Llama-3, Llama-3.1, Gemma) and a corpus of one-construct templates must render byte for byte what
// Python's jinja2 renders under transformers' settings (tests/fixtures/chat_templates, written by
// scripts/fixtures/make_chat_template_fixtures.py); unsupported and malformed templates must throw
// UserError naming the construct and the line, and no input may crash or hang the interpreter.
#include <catch2/catch.hpp>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "fixtures.h"
#include "models/jinja/jinja.h"
#include "models/tokenizers/chat_template.h"

using namespace tandem;
using namespace tandem::models;
using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

const char* const kModels[] = {"qwen2_5", "qwen3", "llama3", "llama3_1", "gemma", "gemma3"};

std::vector<ChatMessage> messages_of(const json& list) {
  std::vector<ChatMessage> out;
  for (const auto& m : list) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

// The message of the UserError `f` throws, or a marker when it throws nothing.
// constructs.json holds dicts whose key order shows in the output (printing, tojson): read it
// with ordered_json, not through load_fixture's sorted json.
const ordered_json& constructs() {
  static const ordered_json data = [] {
    std::ifstream in(std::string(TANDEM_FIXTURES_DIR) + "/chat_templates/constructs.json");
    REQUIRE(in);
    return ordered_json::parse(in);
  }();
  return data;
}

ChatTemplate model_template(const json& fx, const std::string& name) {
  return ChatTemplate::from_source(fx["template"].get<std::string>(), name + "/tokenizer_config.json",
                                   fx["bos_token"].get<std::string>(), fx["eos_token"].get<std::string>());
}

// Where fetch_tokenizers.sh put the real files: $TANDEM_TOKENIZER_DIR, else build/_deps/tokenizers.
std::string real_config(const std::string& name) {
  const char* env = std::getenv("TANDEM_TOKENIZER_DIR");
  const std::string root = env && *env ? env : TANDEM_TOKENIZER_CACHE_DIR;
  return root + "/" + name + "/tokenizer_config.json";
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Parses and renders `source`; anything but success or a UserError fails the test.
void must_not_crash(const std::string& source, const ordered_json& context) {
  try {
    jinja::Template::parse(source, "fuzz").render(context);
  } catch (const UserError&) {
  }
}

}  // namespace

TEST_CASE("real chat templates render as transformers' apply_chat_template does", "[chat_template]") {
  int checked = 0;
  for (const char* name : kModels) {
    const json& fx = test::load_fixture(std::string("chat_templates/") + name + ".json");
    const ChatTemplate t = model_template(fx, name);
    CHECK(t.source() == fx["template"].get<std::string>());
    for (const auto& c : fx["cases"]) {
      INFO(name << ": " << c["name"].get<std::string>());
      CHECK(t.render(messages_of(c["messages"]), c["add_generation_prompt"].get<bool>(), c["extra"]) ==
            c["expected"].get<std::string>());
      ++checked;
    }
  }
  CHECK(checked >= 150);
}

TEST_CASE("conversations a chat template rejects throw its message at its line", "[chat_template]") {
  int checked = 0;
  for (const char* name : kModels) {
    const json& fx = test::load_fixture(std::string("chat_templates/") + name + ".json");
    const ChatTemplate t = model_template(fx, name);
    for (const auto& c : fx["errors"]) {
      INFO(name << ": " << c["name"].get<std::string>() << " (jinja2: " << c["python_error"].get<std::string>() << ")");
      const std::string message = test::user_error_of(
          [&] { t.render(messages_of(c["messages"]), c["add_generation_prompt"].get<bool>(), c["extra"]); });
      CHECK(message.find(std::string("chat template ") + name + "/tokenizer_config.json:") == 0);
      if (!c["line"].is_null())
        CHECK(message.find("tokenizer_config.json:" + std::to_string(c["line"].get<int>()) + ": ") !=
              std::string::npos);
      CHECK(message.find(c["error"].get<std::string>()) != std::string::npos);
      ++checked;
    }
  }
  CHECK(checked >= 20);
}

TEST_CASE("Jinja constructs render as Python's jinja2 renders them", "[chat_template]") {
  const ordered_json& fx = constructs();
  REQUIRE(fx["cases"].size() >= 90);
  for (const auto& c : fx["cases"]) {
    const std::string name = c["name"].get<std::string>();
    INFO(name << ": " << c["template"].get<std::string>());
    const ordered_json& context = c.contains("context") ? c["context"] : fx["default_context"];
    std::string got;
    const std::string error = test::user_error_of(
        [&] { got = jinja::Template::parse(c["template"].get<std::string>(), name).render(context); });
    CHECK(error == "<no error>");
    CHECK(got == c["expected"].get<std::string>());
  }
}

TEST_CASE("unsupported and malformed templates throw UserError naming the construct and the line", "[chat_template]") {
  const ordered_json& fx = constructs();
  REQUIRE(fx["errors"].size() >= 50);
  for (const auto& c : fx["errors"]) {
    const std::string name = c["name"].get<std::string>();
    INFO(name << ": " << c["template"].get<std::string>() << " (jinja2 " << c["python"].get<std::string>() << ")");
    const std::string message = test::user_error_of(
        [&] { jinja::Template::parse(c["template"].get<std::string>(), "t.jinja").render(fx["default_context"]); });
    CHECK(message.find("t.jinja:" + std::to_string(c["line"].get<int>()) + ": ") == 0);
    CHECK(message.find(c["error"].get<std::string>()) != std::string::npos);
  }
}

TEST_CASE("ChatTemplate reads tokenizer_config.json as transformers does", "[chat_template]") {
  test::TempDir dir("chat_template");
  const std::string path = dir.file("tokenizer_config.json");
  const std::string tpl =
      "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{{ eos_token }}{% endfor %}";

  SECTION("a string template and string tokens") {
    write_file(path, json{{"chat_template", tpl}, {"bos_token", "<s>"}, {"eos_token", "</s>"}}.dump());
    const ChatTemplate t = ChatTemplate::from_tokenizer_config(path);
    CHECK(t.bos_token() == "<s>");
    CHECK(t.eos_token() == "</s>");
    CHECK(t.source() == tpl);
    CHECK(t.render({{"user", "hi"}, {"assistant", "yo"}}, false) == "<s>user:hi</s>assistant:yo</s>");
  }
  SECTION("AddedToken objects, null tokens and a named template list") {
    write_file(path, json{{"chat_template", json::array({{{"name", "tool_use"}, {"template", "tools"}},
                                                         {{"name", "default"}, {"template", tpl}}})},
                          {"bos_token", {{"content", "<|bos|>"}, {"lstrip", false}}},
                          {"eos_token", nullptr}}
                         .dump());
    const ChatTemplate t = ChatTemplate::from_tokenizer_config(path);
    CHECK(t.bos_token() == "<|bos|>");
    CHECK(t.eos_token().empty());
    CHECK(t.render({{"user", "hi"}}, true) == "<|bos|>user:hi");
  }
  SECTION("an absent token is undefined in the template, not an empty string") {
    const ChatTemplate t =
        ChatTemplate::from_source("{{ bos_token is defined }}{{ eos_token is defined }}", "x", "", "e");
    CHECK(t.render({}, false) == "FalseTrue");
  }
  SECTION("the render context: tools and documents are None, extra keys override") {
    const ChatTemplate t = ChatTemplate::from_source(
        "{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}{{ enable_thinking }}{{ messages[0] }}",
        "x", "", "");
    CHECK(t.render({{"user", "q"}}, true, json{{"enable_thinking", false}}) ==
          "TrueTrueTrueFalse{'role': 'user', 'content': 'q'}");
  }
  SECTION("errors name the file") {
    write_file(path, json{{"bos_token", "<s>"}}.dump());
    CHECK_THAT(test::user_error_of([&] { ChatTemplate::from_tokenizer_config(path); }),
               Catch::Contains(path) && Catch::Contains("no \"chat_template\""));
    write_file(path, json{{"chat_template", json::array({{{"name", "rag"}, {"template", "x"}}})}}.dump());
    CHECK_THAT(test::user_error_of([&] { ChatTemplate::from_tokenizer_config(path); }),
               Catch::Contains(path) && Catch::Contains("\"default\""));
    write_file(path, json{{"chat_template", "line one\n{% if x %}never closed"}}.dump());
    CHECK_THAT(test::user_error_of([&] { ChatTemplate::from_tokenizer_config(path); }),
               Catch::StartsWith("chat template " + path + ":2: "));
    write_file(path, "{not json");
    CHECK_THAT(test::user_error_of([&] { ChatTemplate::from_tokenizer_config(path); }), Catch::Contains(path));
    CHECK_THAT(test::user_error_of([&] { ChatTemplate::from_tokenizer_config(dir.file("absent.json")); }),
               Catch::Contains("absent.json"));
    CHECK_THAT(test::user_error_of([&] { ChatTemplate::from_file(dir.file("absent.jinja"), "", ""); }),
               Catch::Contains("absent.jinja"));
  }
  SECTION("a plain Jinja file") {
    const std::string file = dir.file("template.jinja");
    write_file(file, tpl + "\n");  // the final newline is not part of the template, as in jinja2
    const ChatTemplate t = ChatTemplate::from_file(file, "[B]", "[E]");
    CHECK(t.render({{"user", "x"}}, false) == "[B]user:x[E]");
  }
}

TEST_CASE("the fetched tokenizer_config.json files hold the fixtures' templates", "[chat_template]") {
  for (const char* name : {"qwen2_5", "qwen3", "llama3"}) {
    const std::string path = real_config(name);
    if (!std::filesystem::exists(path)) {
      WARN("skipped: " << path << " (run scripts/fixtures/fetch_tokenizers.sh)");
      continue;
    }
    const json& fx = test::load_fixture(std::string("chat_templates/") + name + ".json");
    const ChatTemplate t = ChatTemplate::from_tokenizer_config(path);
    CHECK(t.source() == fx["template"].get<std::string>());
    CHECK(t.bos_token() == fx["bos_token"].get<std::string>());
    CHECK(t.eos_token() == fx["eos_token"].get<std::string>());
    const auto& c = fx["cases"][0];
    CHECK(t.render(messages_of(c["messages"]), c["add_generation_prompt"].get<bool>(), c["extra"]) ==
          c["expected"].get<std::string>());
  }
}

TEST_CASE("one ChatTemplate renders from several threads at once", "[chat_template]") {
  const json& fx = test::load_fixture("chat_templates/qwen3.json");
  const ChatTemplate t = model_template(fx, "qwen3");
  const auto& c = fx["cases"][8];
  const std::string expected = c["expected"].get<std::string>();
  const std::vector<ChatMessage> messages = messages_of(c["messages"]);
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      for (int i = 0; i < 200; ++i)
        ok[w] += t.render(messages, c["add_generation_prompt"].get<bool>(), c["extra"]) == expected;
    });
  for (auto& th : threads) th.join();
  CHECK(ok == std::vector<int>(4, 200));
}

TEST_CASE("strftime_now formats the local time", "[chat_template]") {
  const jinja::Template t =
      jinja::Template::parse("{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('%d %b %Y') }}", "t");
  auto today = [] {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y-%m-%d|%d %b %Y", &local);
    return std::string(buf);
  };
  const std::string before = today();
  const std::string got = t.render(json::object());
  CHECK((got == before || got == today()));
}

TEST_CASE("Template keeps dict order as given and checks its context", "[chat_template]") {
  const jinja::Template t = jinja::Template::parse("{{ d }}{{ d|tojson }}", "t");
  CHECK(t.render(ordered_json::parse(R"({"d": {"b": 1, "a": 2}})")) == "{'b': 1, 'a': 2}{\"b\": 1, \"a\": 2}");
  CHECK(t.render(json::parse(R"({"d": {"b": 1, "a": 2}})")) == "{'a': 2, 'b': 1}{\"a\": 2, \"b\": 1}");
  CHECK_THAT(test::user_error_of([&] { t.render(json::array()); }), Catch::Contains("must be a JSON object"));
  CHECK(t.origin() == "t");
}

TEST_CASE("no template text crashes or hangs the interpreter", "[chat_template]") {
  const auto start = std::chrono::steady_clock::now();
  ordered_json context = constructs()["default_context"];
  context["add_generation_prompt"] = true;
  std::vector<std::string> sources;
  for (const char* name : kModels)
    sources.push_back(
        test::load_fixture(std::string("chat_templates/") + name + ".json")["template"].get<std::string>());
  for (const auto& c : constructs()["cases"]) sources.push_back(c["template"].get<std::string>());
  for (const auto& c : constructs()["errors"]) sources.push_back(c["template"].get<std::string>());

  // Every prefix of every real template: unterminated tags, strings and blocks at every point.
  for (size_t m = 0; m < std::size(kModels); ++m)
    for (size_t n = 0; n <= sources[m].size(); ++n) must_not_crash(sources[m].substr(0, n), context);

  // Random edits with the characters that matter to the lexer and parser (fixed seed).
  std::mt19937 rng(1234);
  const std::string alphabet = "{}%#-+()[]'\"|.,:=~*/ \n\tx0\\";
  for (int round = 0; round < 6000; ++round) {
    std::string s = sources[rng() % sources.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[at] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          s.erase(at, 1 + rng() % 8);
          break;
        default:
          s.insert(at, 1, alphabet[rng() % alphabet.size()]);
      }
    }
    must_not_crash(s, context);
  }
  // Bytes that are not UTF-8 travel through unchanged.
  CHECK(jinja::Template::parse("a\xff{{ s }}\xc3", "t").render(ordered_json{{"s", "\xe2\x82"}}) == "a\xff\xe2\x82\xc3");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(120));
}
