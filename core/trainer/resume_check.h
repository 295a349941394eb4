// What a resume checks between a checkpoint's recipe and the current one: the parts a checkpoint's
// tensors depend on (model shapes, tokenizer, LoRA adapters, the optimizer file's format).
#pragma once

#include <string>

#include "core/config/config.h"

namespace tandem {

// Empty when compatible, else a message naming what changed.
std::string incompatible_change(const Config& saved, const Config& current);

}  // namespace tandem
