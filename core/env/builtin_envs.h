// The built-in environments (calculator, guess, lookup), written against a synchronous interface
// (EnvLogic) and served two ways: inside the rank (InProcessEnv) or as a protocol process
// (`tandem env NAME`, serve_env), where they are the protocol's test peers.
#pragma once

#include <deque>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/env/environment.h"

namespace tandem::env {

// A synchronous environment: one call, one answer.
class EnvLogic {
 public:
  virtual ~EnvLogic() = default;
  virtual EnvHello hello() const = 0;
  virtual EnvAnswer reset(const std::string& episode, const nlohmann::json& row, uint64_t seed) = 0;
  virtual EnvAnswer step(const std::string& episode, const StepInput& input) = 0;
  virtual void close(const std::string& episode) = 0;
};

// calculator: a calc(expression) tool; the episode's question is the row's "prompt" with its
//   "answer", or (no prompt) a product of a 3-digit and a 2-digit number drawn from the seed.
//   Reward 1 when the final turn (one without tool calls) ends with the right number.
// guess: a number in 1..64 (the row's "target", else from the seed; tandem's runs send rows of
//   "prompt" and "answer" only, so there it is the seed's); "higher" / "lower" after each
//   guess, reward 1 for the right one, at most 8 turns.
// lookup: a hidden table of 8 keys drawn from the seed and a get(key) tool; the asked key's value
//   appears only in tool answers (masked observations). Reward 1 when the final turn ends with it.
// Throws UserError for an unknown name, listing the built-in ones.
std::unique_ptr<EnvLogic> make_builtin_env(const std::string& name);
const std::vector<std::string>& builtin_env_names();

// The last integer in `text` ("-12" in "so it is -12."), skipping any <think>...</think> block and
// thousands separators; false when there is none.
bool last_integer(const std::string& text, std::string& out);

// A built-in environment inside the rank: answers are ready at the next poll().
class InProcessEnv : public Environment {
 public:
  explicit InProcessEnv(std::unique_ptr<EnvLogic> logic);
  const EnvHello& hello() const override { return hello_; }
  void reset(const std::string& episode, const nlohmann::json& row, uint64_t seed) override;
  void step(const std::string& episode, const StepInput& input) override;
  void close(const std::string& episode) override { logic_->close(episode); }
  std::vector<EnvEvent> poll(std::chrono::milliseconds wait) override;
  size_t pending() const override { return ready_.size(); }

 private:
  std::unique_ptr<EnvLogic> logic_;
  EnvHello hello_;
  std::deque<EnvEvent> ready_;
};

// Serves `logic` over the protocol: one request per line of `in`, one answer line to `out` each.
// Returns 0 at EOF, 2 (with the reason on stderr) for a malformed request.
int serve_env(EnvLogic& logic, std::istream& in, std::ostream& out);

}  // namespace tandem::env
