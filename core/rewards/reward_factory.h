// Builds the AR track's reward from the recipe's tracks.ar.reward fields (passed as plain
// arguments so the factory is testable without a recipe).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/rewards/reward_fn.h"

namespace tandem::rewards {

// `kind` is one of ar_reward_names() (core/config.h): exact_match, partial_match, math_answer, or
// command, which needs `command` and starts the process now. Throws UserError for an unknown kind
// (with the nearest name) or a missing command.
std::unique_ptr<RewardFn> make_reward(const std::string& kind, const std::optional<std::string>& command,
                                      double timeout_s);

}  // namespace tandem::rewards
