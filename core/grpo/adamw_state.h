// An optimizer's moments allocated before the first step. LibTorch's AdamW (and AdamW8bit, as
// torchao's) creates them lazily inside the first step(), after that step's backward has freed its
// activations, so the moments land inside the freed heap and split it: every later step then grows
// the heap to place its large activations around them. Allocated up front they sit below the first
// step's activations. What is allocated is what the first step would have created (zeros, step
// 0), so every step's numbers are unchanged.
#pragma once

#include <torch/optim/optimizer.h>

namespace tandem {

// AdamW and AdamW8bit: zero moments for every parameter that has none yet (a loaded checkpoint's
// state is kept). Other optimizers are left as they are.
void allocate_optimizer_state(torch::optim::Optimizer& optimizer);

}  // namespace tandem
