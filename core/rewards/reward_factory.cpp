// The name -> implementation table for AR rewards.
#include "core/rewards/reward_factory.h"

#include "common/error.h"
#include "core/config/config.h"
#include "core/config/name_tables.h"
#include "core/rewards/math_answer.h"
#include "core/rewards/reward_process.h"
#include "core/rewards/text_match.h"

namespace tandem::rewards {

namespace {

struct ArReward {
  const char* name;
  std::unique_ptr<RewardFn> (*make)(const std::optional<std::string>& command, double timeout_s);
};

const ArReward kArRewards[] = {
    {"exact_match",
     [](const std::optional<std::string>&, double) -> std::unique_ptr<RewardFn> {
       return std::make_unique<ExactMatchReward>();
     }},
    {"partial_match",
     [](const std::optional<std::string>&, double) -> std::unique_ptr<RewardFn> {
       return std::make_unique<PartialMatchReward>();
     }},
    {"math_answer",
     [](const std::optional<std::string>&, double) -> std::unique_ptr<RewardFn> {
       return std::make_unique<MathAnswerReward>();
     }},
    {"command",
     [](const std::optional<std::string>& command, double timeout_s) -> std::unique_ptr<RewardFn> {
       if (!command || command->empty()) throw UserError("reward kind command: reward.command is required");
       return std::make_unique<RewardProcess>(RewardProcessOptions{*command, timeout_s, true});
     }},
};

}  // namespace

const std::vector<std::string>& ar_reward_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const ArReward& r : kArRewards) n.push_back(r.name);
    return n;
  }();
  return names;
}

std::unique_ptr<RewardFn> make_reward(const std::string& kind, const std::optional<std::string>& command,
                                      double timeout_s) {
  for (const ArReward& r : kArRewards)
    if (kind == r.name) return r.make(command, timeout_s);
  throw UserError(unknown_name_message("AR reward", kind, ar_reward_names()));
}

std::string reference_problem(const std::string& kind, const std::string& answer) {
  if (kind == "math_answer") {
    if (const std::string why = math_reference_problem(answer); !why.empty()) return "the reference answer " + why;
  }
  if ((kind == "exact_match" || kind == "partial_match") && answer.empty())
    return "the reference answer is empty, so " + kind + " could never score a response";
  return "";
}

namespace {
const NameRegistrar kArRewardNames(NameTable::kArReward, ar_reward_names());  // for the recipe (config/name_tables.h)
}  // namespace

}  // namespace tandem::rewards
