// Opens what a recipe names before any work starts, so that a wrong path, a tokenizer of another
// model or a data line the reward cannot use fails in the first second with the file and line,
// not at step 8: `tandem check-config` runs it, and `train` runs it on rank 0 before anything is
// built (every rank then exits 2 with rank 0's one message).
#pragma once

#include <string>
#include <vector>

#include "core/config/config.h"

namespace tandem {

// Checks, in order: run.device / parallel.backend against the GPUs this process can use; the run
// directory can be created; tracks.ar.model.hf_dir (config.json, every weight file and tensor
// shape from the safetensors headers); the tokenizer (its vocabulary fits the model's, it has an
// end-of-sequence token) and the chat template (parses, renders); the data (every JSONL line
// parses with its keys, every reference answer is usable by the reward, every prompt plus
// max_new_tokens fits max_seq_len); rollout.replay_dir. Throws UserError naming the key and the
// file (file:line for data); returns one line per check that passed, for check-config to print.
std::vector<std::string> preflight(const Config& config);

}  // namespace tandem
