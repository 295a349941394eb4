// The multi-turn rollout loop with the real Qwen2.5 tokenizer and template, the built-in guess
// and calculator environments, and a scripted turn generator that checks what it is asked: the
// model's ids are kept and alone trained, forced tokens are exactly what the episode gained, caps
// end episodes with their reason, rewards add up, and a failing environment fails its episodes,
// even one whose turn is being generated.
#include <catch2/catch.hpp>

#include "chat_fixtures.h"

#include <filesystem>
#include <map>

#include "core/batch/collate.h"
#include "core/env/builtin_envs.h"
#include "core/env/demonstrations.h"
#include "core/env/episode_runner.h"
#include "core/grpo/loss.h"
#include "models/llama/model.h"

using namespace tandem;
using namespace tandem::env;
using ojson = nlohmann::ordered_json;

namespace {

using Qwen = test::RealChat;

bool load_qwen(Qwen& q) { return test::load_real_chat("qwen2_5", q); }

// Answers each sequence's turns from a script of texts (encoded, + <|im_end|>), one turn per step
// call for every live sequence, and records the sequence it was shown.
class ScriptedGenerator : public TurnGenerator {
 public:
  ScriptedGenerator(const models::Tokenizer& tok, int64_t im_end, std::map<int64_t, std::vector<std::string>> script)
      : tok_(tok), im_end_(im_end), script_(std::move(script)) {}
  void start(int64_t id, const std::vector<int64_t>& prompt, uint64_t, int64_t max_new) override {
    seen[id] = prompt;
    live_[id] = max_new;
  }
  void resume(int64_t id, const std::vector<int64_t>& forced, int64_t max_new) override {
    REQUIRE(!live_.count(id));
    seen[id].insert(seen[id].end(), forced.begin(), forced.end());
    live_[id] = max_new;
  }
  void finish(int64_t id) override {
    REQUIRE(!live_.count(id));
    finished.push_back(id);
  }
  std::vector<GeneratedTurn> step() override {
    std::vector<GeneratedTurn> out;
    for (const auto& [id, max_new] : live_) {
      auto& texts = script_[id];
      const std::string text = texts.empty() ? "no more script" : texts.front();
      if (!texts.empty()) texts.erase(texts.begin());
      GeneratedTurn t{id, tok_.encode(text), {}, true};
      t.tokens.push_back(im_end_);
      if (static_cast<int64_t>(t.tokens.size()) > max_new)
        t.tokens.resize(static_cast<size_t>(max_new)), t.stopped = false;
      for (size_t k = 0; k < t.tokens.size(); ++k) t.logp.push_back(-0.5 - static_cast<double>(k));
      seen[id].insert(seen[id].end(), t.tokens.begin(), t.tokens.end());
      out.push_back(std::move(t));
    }
    live_.clear();
    return out;
  }
  bool busy() const override { return !live_.empty(); }

  std::map<int64_t, std::vector<int64_t>> seen;  // what the generator holds of each sequence
  std::vector<int64_t> finished;

 private:
  const models::Tokenizer& tok_;
  int64_t im_end_;
  std::map<int64_t, std::vector<std::string>> script_;
  std::map<int64_t, int64_t> live_;
};

}  // namespace

TEST_CASE("episodes: model ids kept and alone trained, rewards summed, caps stated", "[env][episode_runner]") {
  Qwen q;
  if (!load_qwen(q)) {
    WARN("skipping: the real Qwen2.5 tokenizer is not in " << test::real_tokenizer_dir("qwen2_5"));
    return;
  }
  InProcessEnv env(make_builtin_env("guess"));
  ConversationFormat format{q.chat_template.get(), q.tokenizer.get(), nullptr, nlohmann::json::object(), "qwen2_5"};
  // Target 40 for all: episode 0 finds it on turn 3, episode 1 never does (max_turns 4), episode 2
  // runs out of tokens.
  ScriptedGenerator gen(*q.tokenizer, q.end_of_turn,
                        {{0, {"32", "48", "40"}}, {1, {"1", "2", "3", "4", "5"}}, {2, {"10", "20", "30", "35"}}});
  const nlohmann::json row{{"target", 40}};
  std::vector<EpisodeSpec> specs{{"a", row, 1, 11}, {"b", row, 1, 12}, {"c", row, 1, 13}};
  EpisodeLimits limits{4, 16, 1000};
  // Episode c gets a token cap just above two turns.
  const auto probe = run_episodes(env, gen, format, {specs[0]}, limits, {q.end_of_turn}, std::nullopt);
  REQUIRE(probe.size() == 1);
  const auto& a = probe[0];
  CHECK(a.end == EpisodeEnd::kDone);
  CHECK(a.reward == 1.0);
  CHECK(a.turns == 3);
  // The sequence the generator held is the episode, token for token (forced = what it gained), up
  // to the last turn's closing tokens, which no later turn needed.
  const auto& held = gen.seen[0];
  REQUIRE(held.size() < a.tokens.size());
  CHECK(held == std::vector<int64_t>(a.tokens.begin(), a.tokens.begin() + static_cast<long>(held.size())));
  for (size_t t = held.size(); t < a.tokens.size(); ++t) CHECK(a.sources[t] == TokenSource::kTemplate);
  // Trained: exactly the model's ids (each turn's text + <|im_end|>), with their log-probs.
  int64_t model = 0;
  for (size_t t = 0; t < a.tokens.size(); ++t)
    if (a.sources[t] == TokenSource::kModel) {
      ++model;
      CHECK(a.logp[t] < 0);
    } else {
      CHECK(a.logp[t] == 0);
    }
  CHECK(model == static_cast<int64_t>(q.tokenizer->encode("32").size() + q.tokenizer->encode("48").size() +
                                      q.tokenizer->encode("40").size() + 3));
  const std::string text = q.tokenizer->decode(a.tokens);
  CHECK(text.find("Higher.") != std::string::npos);
  CHECK(text.find("Lower.") != std::string::npos);

  InProcessEnv env2(make_builtin_env("guess"));
  ScriptedGenerator gen2(*q.tokenizer, q.end_of_turn, {{0, {"1", "2", "3", "4", "5"}}, {1, {"10", "20", "30", "35"}}});
  const int64_t cap = a.prompt_len + 12;  // two short turns and their observations do not fit
  const auto both =
      run_episodes(env2, gen2, format, {specs[1], specs[2]}, EpisodeLimits{4, 16, cap}, {q.end_of_turn}, std::nullopt);
  CHECK(both[0].end == EpisodeEnd::kMaxTokens);
  CHECK(both[0].reward == 0.0);
  CHECK(static_cast<int64_t>(both[0].tokens.size()) <= cap);
  InProcessEnv env3(make_builtin_env("guess"));
  ScriptedGenerator gen3(*q.tokenizer, q.end_of_turn, {{0, {"1", "2", "3", "4", "5"}}});
  const auto capped =
      run_episodes(env3, gen3, format, {specs[1]}, EpisodeLimits{4, 16, 1000}, {q.end_of_turn}, std::nullopt);
  CHECK(capped[0].end == EpisodeEnd::kMaxTurns);
  CHECK(capped[0].turns == 4);
  CHECK(gen3.finished == std::vector<int64_t>{0});
}

TEST_CASE("episodes: tool calls parsed and answered; a cut turn gets its end-of-turn token", "[env][episode_runner]") {
  Qwen q;
  if (!load_qwen(q)) {
    WARN("skipping: the real Qwen2.5 tokenizer is not in " << test::real_tokenizer_dir("qwen2_5"));
    return;
  }
  InProcessEnv env(make_builtin_env("calculator"));
  ConversationFormat format{q.chat_template.get(), q.tokenizer.get(), env.hello().tools, nlohmann::json::object(),
                            "qwen2_5"};
  ScriptedGenerator gen(
      *q.tokenizer, q.end_of_turn,
      {{0,
        {"<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expression\": \"347 * 29\"}}\n</tool_call>",
         "<tool_call>{oops}</tool_call>", "It is 10063."}}});
  const nlohmann::json row{{"prompt", "What is 347 * 29?"}, {"answer", "10063"}};
  const auto out = run_episodes(env, gen, format, {{"x", row, 3, 4}}, EpisodeLimits{4, 64, 2000}, {q.end_of_turn},
                                std::string("You are a careful calculator."));
  REQUIRE(out.size() == 1);
  CHECK(out[0].end == EpisodeEnd::kDone);
  CHECK(out[0].reward == 1.0);
  CHECK(out[0].tool_calls == 1);
  CHECK(out[0].parse_errors == 1);
  const std::string text = q.tokenizer->decode(out[0].tokens);
  CHECK(text.find("<tool_response>\n10063\n</tool_response>") != std::string::npos);
  CHECK(text.find("error: tool call 1: not a JSON object: '{oops}'") != std::string::npos);
  CHECK(text.find("You are a careful calculator.") != std::string::npos);
  CHECK(text.find("\"name\": \"calc\"") != std::string::npos);  // the tool schema is in the prompt

  // A turn cut at its token cap: the template's <|im_end|> follows, untrained.
  InProcessEnv env2(make_builtin_env("guess"));
  ScriptedGenerator gen2(*q.tokenizer, q.end_of_turn, {{0, {"one two three four five six seven"}}});
  const auto cut = run_episodes(env2, gen2, format, {{"y", nlohmann::json{{"target", 3}}, 1, 1}},
                                EpisodeLimits{1, 3, 2000}, {q.end_of_turn}, std::nullopt);
  const auto& t = cut[0];
  const auto [b, e] =
      std::pair<size_t, size_t>{static_cast<size_t>(t.prompt_len), static_cast<size_t>(t.prompt_len) + 3};
  CHECK(t.end == EpisodeEnd::kMaxTurns);
  for (size_t i = b; i < e; ++i) CHECK(t.sources[i] == TokenSource::kModel);
  REQUIRE(t.tokens.size() > e);
  CHECK(t.tokens[e] == q.end_of_turn);
  CHECK(t.sources[e] == TokenSource::kTemplate);
}

namespace {

// An environment whose process "fails" while the model generates: every event is a failure.
class FailingEnv : public Environment {
 public:
  const EnvHello& hello() const override { return hello_; }
  void reset(const std::string& e, const nlohmann::json&, uint64_t) override {
    ready_.push_back(EnvEvent{e, true, {}, std::nullopt});
    ready_.back().answer.messages = ojson::array({ojson{{"role", "user"}, {"content", "go"}}});
  }
  void step(const std::string& e, const StepInput&) override {
    ready_.push_back(EnvEvent{e, false, {}, std::string("environment 'x' timed out")});
  }
  void close(const std::string&) override {}
  std::vector<EnvEvent> poll(std::chrono::milliseconds) override {
    auto out = ready_;
    ready_.clear();
    return out;
  }
  size_t pending() const override { return ready_.size(); }

 private:
  EnvHello hello_{"failing", ojson::array(), 3, {}};
  std::vector<EnvEvent> ready_;
};

}  // namespace

TEST_CASE("episodes: a failure ends the episode with its reason, the generator is released", "[env][episode_runner]") {
  Qwen q;
  if (!load_qwen(q)) {
    WARN("skipping: the real Qwen2.5 tokenizer is not in " << test::real_tokenizer_dir("qwen2_5"));
    return;
  }
  FailingEnv env;
  ConversationFormat format{q.chat_template.get(), q.tokenizer.get(), nullptr, nlohmann::json::object(), "qwen2_5"};
  ScriptedGenerator gen(*q.tokenizer, q.end_of_turn, {{0, {"hi"}}, {1, {"ho"}}});
  const auto out = run_episodes(env, gen, format, {{"a", {}, 1, 1}, {"b", {}, 1, 2}}, EpisodeLimits{3, 8, 500},
                                {q.end_of_turn}, std::nullopt);
  for (const auto& o : out) {
    CHECK(o.end == EpisodeEnd::kFailed);
    CHECK(o.failure == "environment 'x' timed out");
  }
  CHECK(gen.finished.size() == 2);
}

namespace {

// Opens with its own system message when asked to (the row's "system"), then ends at the first turn.
class SystemEnv : public EnvLogic {
 public:
  EnvHello hello() const override { return {"system", ojson::array(), 1, {}}; }
  EnvAnswer reset(const std::string&, const nlohmann::json& row, uint64_t) override {
    EnvAnswer a;
    if (row.is_object() && row.value("system", false))
      a.messages.push_back(ojson{{"role", "system"}, {"content", "ENV SYSTEM"}});
    a.messages.push_back(ojson{{"role", "user"}, {"content", "hi"}});
    return a;
  }
  EnvAnswer step(const std::string&, const StepInput&) override {
    EnvAnswer a;
    a.done = true;
    return a;
  }
  void close(const std::string&) override {}
};

}  // namespace

TEST_CASE("episodes: an environment's own system message replaces the recipe's, as in a demonstration",
          "[env][episode_runner]") {
  Qwen q;
  if (!load_qwen(q)) {
    WARN("skipping: the real Qwen2.5 tokenizer is not in " << test::real_tokenizer_dir("qwen2_5"));
    return;
  }
  InProcessEnv env(std::make_unique<SystemEnv>());
  ConversationFormat format{q.chat_template.get(), q.tokenizer.get(), nullptr, nlohmann::json::object(), "qwen2_5"};
  ScriptedGenerator gen(*q.tokenizer, q.end_of_turn, {{0, {"x"}}, {1, {"x"}}});
  const std::vector<EpisodeSpec> specs{{"own", nlohmann::json{{"system", true}}, 1, 1}, {"none", {}, 1, 2}};
  const auto out =
      run_episodes(env, gen, format, specs, EpisodeLimits{1, 8, 500}, {q.end_of_turn}, std::string("RECIPE SYSTEM"));
  REQUIRE(out.size() == 2);
  const std::string own = q.tokenizer->decode(out[0].tokens), none = q.tokenizer->decode(out[1].tokens);
  CHECK(own.find("ENV SYSTEM") != std::string::npos);
  CHECK(own.find("RECIPE SYSTEM") == std::string::npos);
  CHECK(std::count_if(out[0].messages.begin(), out[0].messages.end(),
                      [](const ojson& m) { return m["role"] == "system"; }) == 1);
  CHECK(out[0].messages[0]["content"] == "ENV SYSTEM");
  // Control: without its own, the episode opens with the recipe's.
  CHECK(none.find("RECIPE SYSTEM") != std::string::npos);
  // And the layout is the warm-start's: a demonstration of the same conversation renders the same prompt.
  const ojson demo =
      ojson::array({ojson{{"role", "system"}, {"content", "ENV SYSTEM"}}, ojson{{"role", "user"}, {"content", "hi"}},
                    ojson{{"role", "assistant"}, {"content", "x"}}});
  const ArSample d = demonstration_sample(format, demo, q.end_of_turn, std::string("RECIPE SYSTEM"), 500, "demo");
  CHECK(std::vector<int64_t>(d.tokens.begin(), d.tokens.begin() + d.prompt_len) ==
        std::vector<int64_t>(out[0].tokens.begin(), out[0].tokens.begin() + out[0].prompt_len));
}

TEST_CASE("episodes train the model's tokens only: environment targets change no gradient", "[env][episode_runner]") {
  Qwen q;
  if (!load_qwen(q)) {
    WARN("skipping: the real Qwen2.5 tokenizer is not in " << test::real_tokenizer_dir("qwen2_5"));
    return;
  }
  // A lookup episode: the hidden value appears only in the tool's answer, which must never be a target.
  InProcessEnv env(make_builtin_env("lookup"));
  ConversationFormat format{q.chat_template.get(), q.tokenizer.get(), env.hello().tools, nlohmann::json::object(),
                            "qwen2_5"};
  const auto first = make_builtin_env("lookup")->reset("probe", nlohmann::json::object(), 9).messages[0];
  const std::string prompt = first["content"];
  const auto a = prompt.find('\'');
  const std::string key = prompt.substr(a + 1, prompt.find('\'', a + 1) - a - 1);
  ScriptedGenerator gen(*q.tokenizer, q.end_of_turn,
                        {{0,
                          {"<tool_call>\n{\"name\": \"get\", \"arguments\": {\"key\": \"" + key + "\"}}\n</tool_call>",
                           "I do not know."}}});
  const auto out = run_episodes(env, gen, format, {{"e", nlohmann::json::object(), 9, 1}}, EpisodeLimits{4, 64, 2000},
                                {q.end_of_turn}, std::nullopt);
  REQUIRE(out[0].end == EpisodeEnd::kDone);
  ArSample sample = episode_sample(out[0]);
  sample.advantage = 1.0;
  const PackedBatch b = collate_packed({&sample}, LossDenominators{1, 1, 1}, torch::kFloat64);
  // Loss mask 1 exactly where the target is a model token, with that token's rollout log-prob.
  const auto targets = b.targets.accessor<int64_t, 1>();
  const auto mask = b.loss_mask.accessor<double, 1>();
  const auto rollout = b.rollout_logp.accessor<double, 1>();
  int64_t trained = 0;
  for (int64_t j = 0; j + 1 < b.num_tokens(); ++j) {
    const bool model = out[0].sources[static_cast<size_t>(j + 1)] == TokenSource::kModel;
    CHECK(mask[j] == (model ? 1.0 : 0.0));
    if (model) {
      CHECK(targets[j] == out[0].tokens[static_cast<size_t>(j + 1)]);
      CHECK(rollout[j] == out[0].logp[static_cast<size_t>(j + 1)]);
      ++trained;
    }
  }
  CHECK(trained == sample.action_tokens());
  // The gradient of the policy loss on a small model: the same whatever the environment's (and
  // template's, prompt's) targets are. Control: one unmasked environment target changes it.
  models::LlamaConfig c;
  c.vocab_size = q.tokenizer->vocab_size(), c.hidden_size = 8, c.num_layers = 1, c.num_heads = 2, c.num_kv_heads = 1;
  c.intermediate_size = 16, c.max_seq_len = 1024;
  models::LlamaForCausalLM model(c, parallel::ParallelContext{}, 3);
  model->to(torch::kFloat64);
  models::PackedInput input{b.input_ids, b.position_ids, b.cu_seqlens, b.max_seqlen, {}};
  const auto grad_of = [&](const torch::Tensor& tgt, const torch::Tensor& m) {
    model->zero_grad();
    const torch::Tensor logp =
        torch::log_softmax(model->logits(input), -1).gather(1, tgt.view({-1, 1})).view(-1);  // (N)
    const PolicyLoss pl = policy_loss(logp, logp.detach(), b.advantages, m, b.seq_index, PolicyLossOptions{});
    (pl.loss * m).sum().backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  const auto base = grad_of(b.targets, b.loss_mask);
  torch::Tensor other = b.targets.clone();
  const torch::Tensor masked = b.loss_mask == 0;
  other.masked_fill_(masked, 7);  // every untrained target replaced
  int64_t env_target = -1;
  for (int64_t j = 0; j + 1 < b.num_tokens(); ++j)
    if (out[0].sources[static_cast<size_t>(j + 1)] == TokenSource::kEnv && env_target < 0) env_target = j;
  REQUIRE(env_target >= 0);
  const auto changed = grad_of(other, b.loss_mask);
  for (size_t i = 0; i < base.size(); ++i) CHECK(torch::equal(base[i], changed[i]));
  torch::Tensor leak = b.loss_mask.clone();
  leak[env_target] = 1.0;
  const auto leaked = grad_of(other, leak);
  double diff = 0;
  for (size_t i = 0; i < base.size(); ++i) diff = std::max(diff, (base[i] - leaked[i]).abs().max().item<double>());
  CHECK(diff > 1e-8);
}
