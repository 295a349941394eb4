// The calculator environment's arithmetic: + - * / and parentheses over integers (exact, 64-bit,
// overflow refused) and decimals (double). Nothing else is evaluated: no names, no calls.
#pragma once

#include <string>

namespace tandem::env {

// The value as text ("10063", "-2.5"), or throws UserError naming the position of the problem
// ("expected a number at 4 in '3 + * 2'", "division by zero", "integer overflow").
std::string evaluate_arithmetic(const std::string& expression);

}  // namespace tandem::env
