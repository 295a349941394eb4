// Token-in-token-out episodes against transformers: each conversation of
// tests/fixtures/episodes.json (real Qwen2.5, Qwen3 and Llama-3.1 tokenizers and templates, with
// tools) built turn by turn equals apply_chat_template on the whole conversation, id for id;
// the templates that are not append-only are refused naming the boundary.
#include <catch2/catch.hpp>

#include "chat_fixtures.h"

#include <fstream>
#include <tuple>

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

TEST_CASE("Qwen3: a turn without a closed think block goes on, its tokens the whole conversation's render",
          "[env][episode]") {
  // Rendered last, such a turn gets an empty "<think>\n\n</think>\n\n" in front; followed by more
  // messages it does not. The episode checks the longer render against the text the model saw.
  Loaded l;
  if (!load("qwen3", l)) {
    WARN("skipping: the real Qwen3 tokenizer is not in " << test::real_tokenizer_dir("qwen3"));
    return;
  }
  ConversationFormat format{l.chat_template.get(), l.tokenizer.get(), nullptr, nlohmann::json::object(), "qwen3"};
  const ojson first = ojson::array({ojson{{"role", "user"}, {"content", "What is 6 * 7? Use the tool."}}});
  const ojson tool = ojson::array({ojson{{"role", "tool"}, {"content", "42"}}});
  for (const auto& [what, text, stop] :
       {std::tuple<std::string, std::string, bool>{"cut inside <think>", "<think>\nI should call", false},
        {"no think block", "It is 42.", true}}) {
    INFO(what);
    Episode episode(format, first);
    std::vector<int64_t> sampled = l.tokenizer->encode(text);
    if (stop) sampled.push_back(l.end_of_turn);
    CHECK(episode.add_model_turn(sampled, stop) == text);
    REQUIRE_NOTHROW(episode.add_observation(tool));
    // The tokens' text is the whole conversation as the template renders it (what transformers'
    // apply_chat_template gives), and the model's ids sit in it untouched.
    ojson all = first;
    all.push_back(ojson{{"role", "assistant"}, {"content", text}});
    all.push_back(tool[0]);
    CHECK(l.tokenizer->decode(episode.tokens()) == format.render(all, true));
    const auto [b, e] = episode.turn_spans()[0];
    CHECK(std::vector<int64_t>(episode.tokens().begin() + b, episode.tokens().begin() + e) == sampled);
    // Control: the rendering of that turn as the last message is not a prefix of it.
    ojson last = first;
    last.push_back(ojson{{"role", "assistant"}, {"content", text}});
    const std::string full = format.render(all, true), alone = format.render(last, false);
    CHECK(full.compare(0, alone.size(), alone) != 0);
  }
  // Still refused: an earlier turn's think block dropped once a user message follows (the tokens
  // the model saw would not be the conversation's).
  Episode episode(format, first);
  episode.add_model_turn(l.tokenizer->encode("<think>\nok\n</think>\n\nAsk me again."), false);
  const ojson user = ojson::array({ojson{{"role", "user"}, {"content", "Again: 6 * 7?"}}});
  CHECK_THROWS_AS(episode.add_observation(user), NotAppendOnly);
}
