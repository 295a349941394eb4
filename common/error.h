// The one error type for bad user input (recipes, flags, files): main() turns it into a
// one-line message and exit code 2. Everything else that throws is a bug or a system failure.
// It lives in common/, below every layer, so parallel/, models/, core/ and apps/ all throw it
// without any of them including another layer's headers for it.
#pragma once

#include <stdexcept>
#include <string>

namespace tandem {

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace tandem
