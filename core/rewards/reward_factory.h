// Builds the AR track's reward from the recipe's tracks.ar.reward fields (passed as plain
// arguments so the factory is testable without a recipe).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/rewards/reward_fn.h"

namespace tandem::rewards {

// The AR reward names make_reward() builds: the recipe schema offers exactly these.
const std::vector<std::string>& ar_reward_names();

// `kind` is one of ar_reward_names(): exact_match, partial_match, math_answer, or
// command, which needs `command` and starts the process now. Throws UserError for an unknown kind
// (with the nearest name) or a missing command.
std::unique_ptr<RewardFn> make_reward(const std::string& kind, const std::optional<std::string>& command,
                                      double timeout_s);

// Why `answer` cannot serve as the reference of reward `kind` ("" when it can): math_answer needs
// a number in it, exact_match and partial_match a non-empty text; a command decides for itself.
std::string reference_problem(const std::string& kind, const std::string& answer);

}  // namespace tandem::rewards
