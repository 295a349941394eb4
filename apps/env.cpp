// `tandem env NAME`: a built-in environment served over the environment protocol on stdin /
// stdout (docs/env_protocol.md), the reference peer for environments written elsewhere.
#include <iostream>

#include "apps/commands.h"
#include "core/env/builtin_envs.h"

namespace tandem::app {

int run_env(const std::string& name) {
  auto logic = env::make_builtin_env(name);
  std::ios::sync_with_stdio(false);
  return env::serve_env(*logic, std::cin, std::cout);
}

}  // namespace tandem::app
