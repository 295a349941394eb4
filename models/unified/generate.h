// Text generation with the unified model: the Llama sampler's contract (models/llama/sampler.h:
// per-sample streams, pick_token, stop ids / sequences, untempered log-probs) on a model without
// a KV cache, so every token recomputes its sequence's prefix. The unified recipes keep text
// short (a prompt of a few tokens, a few answer tokens), where that costs little.
#pragma once

#include <vector>

#include "models/llama/sampler.h"
#include "models/unified/model.h"

namespace tandem::models {

// One response per request, in request order; up to params.max_batch sequences per forward.
// No gradients. Throws UserError for invalid params, an empty prompt, an id outside the
// vocabulary, or prompt + max_new_tokens beyond the model's max_text_len.
std::vector<Generation> generate_unified(UnifiedModelImpl& model, const std::vector<GenerationRequest>& requests,
                                         const SamplingParams& params);

}  // namespace tandem::models
