// The AR reward interface: a batch of (prompt, response, reference answer) in, one finite score
// per sample out. Built-ins live in text_match.h and math_answer.h, the external process in
// reward_process.h, the name -> implementation table in reward_factory.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::rewards {

struct RewardInput {
  std::string prompt;
  std::string response;      // decoded generation (may still hold an end-of-sequence marker)
  std::string answer;        // the prompt source's reference answer
  int64_t sample_index = 0;  // the sample's index in the step's rollout, for error messages
};

class RewardFn {
 public:
  virtual ~RewardFn() = default;
  // One score per input, in order. Throws UserError naming the sample index when a sample cannot
  // be scored (an answer a reward cannot read, a failing reward process).
  virtual std::vector<double> score(const std::vector<RewardInput>& inputs) = 0;
  virtual std::string name() const = 0;
};

}  // namespace tandem::rewards
