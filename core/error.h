// The one error type for bad user input (recipes, flags, files): main() turns it into a
// one-line message and exit code 2. Everything else that throws is a bug or a system failure.
#pragma once

#include <stdexcept>
#include <string>

namespace tandem {

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace tandem
