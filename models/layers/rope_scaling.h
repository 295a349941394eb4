// HF's rope_scaling as plain data: none (plain RoPE), linear (every frequency / factor) or llama3
// (Llama 3.1's wavelength-dependent blend of the two). Below the model families that name it.
#pragma once

#include <cstdint>

namespace tandem::models {

enum class RopeScalingKind { kNone, kLinear, kLlama3 };

struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;      // llama3 only
  double high_freq_factor = 4.0;     // llama3 only
  int64_t original_max_seq_len = 0;  // llama3: original_max_position_embeddings
  bool operator==(const RopeScaling& o) const {
    return kind == o.kind && factor == o.factor && low_freq_factor == o.low_freq_factor &&
           high_freq_factor == o.high_freq_factor && original_max_seq_len == o.original_max_seq_len;
  }
};

}  // namespace tandem::models
