// The gated MLP's activation, act(gate) * up (SwiGLU with silu, Gemma 3's GeGLU with tanh GeLU),
// as one autograd node that saves gate and up only: when both need gradients, autograd through
// the two ops also keeps act(gate), one more (N, I) tensor per layer until the backward (at 32K
// tokens on the mid model 185 MB a layer). The backward recomputes act(gate) and runs the ops autograd would, in the
// same order, so the gradients are bitwise those of the unfused form.
#pragma once

#include <torch/torch.h>

namespace tandem::models {

enum class GateActivation { kSilu, kGeluTanh };

// gate, up: (..., I) of one dtype -> (..., I). The node when gate needs a gradient, else (sampling,
// scoring, a frozen gate) the plain ops.
torch::Tensor gated_activation(const torch::Tensor& gate, const torch::Tensor& up, GateActivation act);

}  // namespace tandem::models
