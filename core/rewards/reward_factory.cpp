// The name -> implementation table for AR rewards.
#include "core/rewards/reward_factory.h"

#include "common/error.h"
#include "core/config.h"
#include "core/rewards/math_answer.h"
#include "core/rewards/reward_process.h"
#include "core/rewards/text_match.h"

namespace tandem::rewards {

std::unique_ptr<RewardFn> make_reward(const std::string& kind, const std::optional<std::string>& command,
                                      double timeout_s) {
  if (kind == "exact_match") return std::make_unique<ExactMatchReward>();
  if (kind == "partial_match") return std::make_unique<PartialMatchReward>();
  if (kind == "math_answer") return std::make_unique<MathAnswerReward>();
  if (kind == "command") {
    if (!command || command->empty()) throw UserError("reward kind command: reward.command is required");
    return std::make_unique<RewardProcess>(RewardProcessOptions{*command, timeout_s, true});
  }
  throw UserError(unknown_name_message("AR reward", kind, ar_reward_names()));
}

std::string reference_problem(const std::string& kind, const std::string& answer) {
  if (kind == "math_answer" && !final_number(answer))
    return "the reference answer has no number for math_answer to compare against";
  if ((kind == "exact_match" || kind == "partial_match") && answer.empty())
    return "the reference answer is empty, so " + kind + " could never score a response";
  return "";
}

}  // namespace tandem::rewards
