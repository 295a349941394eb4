// The seam between the recipe and the rooms that own what it names. config/ is the ground floor of
// core/: it includes no other room, yet a recipe names tasks (tasks/), rewards (rewards/) and an AR
// architecture whose rules live with the policies (policies/). Each owner registers its table here
// when the program starts, through a registrar object in its own .cpp; the schema and validate()
// read the tables without knowing who filled them. The executables link tandem_core whole
// (CMake's WHOLE_ARCHIVE), so every registrar runs; a table nobody filled is an internal error.
#pragma once

#include <string>
#include <vector>

namespace tandem {

struct Config;

enum class NameTable { kArTask, kImageTask, kArReward, kImageReward };

// The registered names in registration order; throws std::logic_error when no owner registered
// the table (a registrar dropped at link time).
const std::vector<std::string>& registered_names(NameTable table);

struct NameRegistrar {
  NameRegistrar(NameTable table, const std::vector<std::string>& names);
};

// Cross-field rules of the AR model section that its architecture's owner adds (beyond the schema's
// per-key ranges); each throws UserError naming the key. validate() runs them all for an enabled
// AR track, and throws std::logic_error when none is registered.
using ConfigRule = void (*)(const Config& config);
void run_ar_model_rules(const Config& config);

struct ArModelRuleRegistrar {
  explicit ArModelRuleRegistrar(ConfigRule rule);
};

}  // namespace tandem
