// Token-in-token-out episodes against transformers: each conversation of
// tests/fixtures/episodes.json (real Qwen2.5, Qwen3 and Llama-3.1 tokenizers and templates, with
// tools) built turn by turn equals apply_chat_template on the whole conversation, id for id;
// the templates that are not append-only are refused naming the boundary.
#include <catch2/catch.hpp>

#include "chat_fixtures.h"

#include <fstream>

#include "common/error.h"
#include "core/env/episode.h"

using namespace tandem;
using namespace tandem::env;
using ojson = nlohmann::ordered_json;

namespace {

using Loaded = test::RealChat;

bool load(const std::string& name, Loaded& out) { return test::load_real_chat(name, out); }

// ordered_json: the tools' keys keep the fixture's order, which the templates print.
ojson fixtures() { return ojson::parse(std::ifstream(std::string(TANDEM_FIXTURES_DIR) + "/episodes.json")); }

// Plays a fixture's steps into an episode; the model's ids are the assistant text's own ids (plus
// the end-of-turn id when the turn stopped on it).
void play(Episode& episode, const ojson& c, const Loaded& l, std::vector<std::string>* texts = nullptr) {
  size_t turn = 0;
  for (const auto& step : c["steps"]) {
    if (step.contains("model")) {
      std::vector<int64_t> ids = c["model_ids"][turn++].get<std::vector<int64_t>>();
      const bool stop = step["stop_id"].get<bool>();
      if (stop) ids.push_back(l.end_of_turn);
      const std::string text = episode.add_model_turn(ids, stop);
      if (texts) texts->push_back(text);
    } else {
      episode.add_observation(step["env"]);
    }
  }
}

}  // namespace

TEST_CASE("episodes built turn by turn equal apply_chat_template on the whole conversation", "[env][episode]") {
  int checked = 0;
  for (const auto& c : fixtures()) {
    const std::string name = c["tokenizer"], label = name + "/" + c["case"].get<std::string>();
    Loaded l;
    if (!load(name, l)) {
      WARN("skipping " << label << ": the real tokenizer is not in " << test::real_tokenizer_dir(name));
      continue;
    }
    ConversationFormat format{l.chat_template.get(), l.tokenizer.get(), c["tools"],
                              nlohmann::json::parse(c["extra"].dump()), label};
    INFO(label);
    Episode episode(format, c["first"]);
    if (!c["append_only"].get<bool>()) {
      const std::string message = [&] {
        try {
          play(episode, c, l);
        } catch (const NotAppendOnly& e) {
          return std::string(e.what());
        }
        return std::string("<no error>");
      }();
      CHECK_THAT(message, Catch::Contains("is not append-only after an assistant turn") && Catch::Contains(label));
      ++checked;
      continue;
    }
    std::vector<std::string> texts;
    play(episode, c, l, &texts);
    const auto expected = c["ids"].get<std::vector<int64_t>>();
    CHECK(episode.tokens() == expected);
    if (episode.tokens() != expected) {
      // Name the first differing position, decoded, to make a failure readable.
      size_t at = 0;
      while (at < expected.size() && at < episode.tokens().size() && expected[at] == episode.tokens()[at]) ++at;
      FAIL_CHECK("first difference at token " << at << " of " << expected.size());
    }
    // The model's ids are in the sequence untouched, trained; nothing else is.
    size_t model_tokens = 0, turn = 0;
    for (const auto& step : c["steps"])
      if (step.contains("model")) {
        const auto [b, e] = episode.turn_spans()[turn];
        auto ids = c["model_ids"][turn].get<std::vector<int64_t>>();
        if (step["stop_id"].get<bool>()) ids.push_back(l.end_of_turn);
        CHECK(std::vector<int64_t>(episode.tokens().begin() + b, episode.tokens().begin() + e) == ids);
        CHECK(texts[turn] == step["model"].get<std::string>());
        model_tokens += ids.size();
        ++turn;
      }
    CHECK(static_cast<size_t>(std::count(episode.sources().begin(), episode.sources().end(), TokenSource::kModel)) ==
          model_tokens);
    CHECK(episode.sources().size() == episode.tokens().size());
    CHECK(episode.turns() == static_cast<int>(turn));
    ++checked;
  }
  if (checked == 0) WARN("no episode fixture ran: no real tokenizer files");
}

TEST_CASE("a turn cut by a stop string gets the end-of-turn token, untrained", "[env][episode]") {
  Loaded l;
  if (!load("qwen2_5", l)) {
    WARN("skipping: the real Qwen2.5 tokenizer is not in " << test::real_tokenizer_dir("qwen2_5"));
    return;
  }
  ConversationFormat format{l.chat_template.get(), l.tokenizer.get(), nullptr, nlohmann::json::object(), "qwen2_5"};
  Episode episode(format, ojson::array({ojson{{"role", "user"}, {"content", "hi"}}}));
  const auto sampled = l.tokenizer->encode("<tool_call>\n{}\n</tool_call>");
  const size_t before = episode.tokens().size();
  episode.add_model_turn(sampled, false);
  // sampled, then <|im_end|> and "\n" from the template (not trained).
  REQUIRE(episode.tokens().size() == before + sampled.size() + 2);
  CHECK(episode.tokens()[before + sampled.size()] == l.end_of_turn);
  CHECK(episode.sources()[before + sampled.size()] == TokenSource::kTemplate);
  CHECK(episode.sources()[before + sampled.size() + 1] == TokenSource::kTemplate);
  // A turn that stopped on <|im_end|> gets only the "\n".
  Episode other(format, ojson::array({ojson{{"role", "user"}, {"content", "hi"}}}));
  auto with_stop = l.tokenizer->encode("hello");
  with_stop.push_back(l.end_of_turn);
  other.add_model_turn(with_stop, true);
  CHECK(other.tokens().size() == before + with_stop.size() + 1);
  // The model's ids are kept even where re-encoding its text would split differently: "hello" as
  // single-letter ids decodes to the same text but stays five ids.
  Episode third(format, ojson::array({ojson{{"role", "user"}, {"content", "hi"}}}));
  std::vector<int64_t> letters;
  for (char ch : std::string("hello")) letters.push_back(l.tokenizer->encode(std::string(1, ch))[0]);
  CHECK(third.add_model_turn(letters, false) == "hello");
  CHECK(std::vector<int64_t>(third.tokens().begin() + static_cast<long>(before),
                             third.tokens().begin() + static_cast<long>(before + 5)) == letters);
  CHECK(l.tokenizer->encode("hello") != letters);  // the control: re-tokenising would change them
}
