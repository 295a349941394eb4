// Which attention a model runs, as a plain value (no LibTorch here: model configs carry it).
#pragma once

#include <optional>
#include <string>

namespace tandem::models {

// kAuto fuses every dtype but float64 (models/layers/fused_attention.h); kMaterialised keeps the
// (L_q, L_k) scores (float64's reference, and one side of a side-by-side benchmark); kFused fuses
// float64 too (tests of the kernels).
enum class AttentionKernel { kAuto, kFused, kMaterialised };

std::optional<AttentionKernel> parse_attention_kernel(const std::string& name);  // auto | fused | materialised
const char* attention_kernel_name(AttentionKernel kernel);

}  // namespace tandem::models
