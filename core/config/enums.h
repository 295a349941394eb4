// Recipe enums and their spelled names. Kept free of LibTorch so the recipe layer stays light;
// the numerics headers reuse these types.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace tandem {

// bfloat16: bf16 compute with float32 master weights and AdamW state; bfloat16-pure: everything bf16.
enum class DType { kFloat32, kBFloat16, kFloat64, kBFloat16Pure };
enum class Device { kAuto, kCpu, kCuda };
enum class Backend { kAuto, kMpi, kNccl };
enum class LrSchedule { kConstant, kCosine, kLinear };
enum class LossAggMode { kTokenMean, kSeqMeanTokenMean, kSeqMeanTokenSum, kSeqMeanTokenSumNorm };
enum class TokenizerKind { kChar, kHf };
enum class RatioKind { kToken, kSequence };
enum class KlEstimator { kK1, kK2, kK3 };
enum class OldLogp { kRecompute, kRollout, kReuse };
enum class BatchLayout { kAuto, kPacked, kPadded };
enum class CfgGrad { kFull, kCondOnly };
enum class RopeType { kNone, kLinear, kLlama3 };
// The AR policy: a Llama / Qwen2 decoder, or the shared text + image transformer (models/unified).
enum class ArArch { kLlama, kUnified };
// The llama arch's decoder layer: Llama's (also Qwen2, Qwen3, Mistral) or Gemma 3's.
enum class ArBlock { kLlama, kGemma3 };
// The image policy: the track's own DiT, or the AR track's unified model prompted by text.
enum class ImageArch { kDit, kShared };
// A GRPO group's prompt computed once (rollout prefill and packed training micros) or per sample.
enum class SharePrompt { kAuto, kOff };
// The AR decoder's attention: fused kernels (all but float64), or forced fused / materialised.
enum class AttentionImpl { kAuto, kFused, kMaterialised };
// Activation recompute in the AR decoder's training backward: none, or every decoder layer.
enum class Recompute { kNone, kLayers };
// What a multi-turn episode trains as: one sample, or one sample per model turn (tracks.ar.env.samples).
enum class EnvSamples { kEpisode, kTurn };
// AdamW's two moments: float32 (torch::optim::AdamW), or blockwise 8-bit (core/grpo/adamw_8bit.h).
enum class OptimMoments { kFloat32, k8bit };

template <class E>
struct EnumNames;  // specialised below: static constexpr std::array<std::pair<E, const char*>, N> kNames

#define TANDEM_ENUM_NAMES(E, N, ...)                                                 \
  template <>                                                                        \
  struct EnumNames<E> {                                                              \
    static constexpr std::array<std::pair<E, const char*>, N> kNames{{__VA_ARGS__}}; \
  };

TANDEM_ENUM_NAMES(DType, 4, {DType::kFloat32, "float32"}, {DType::kBFloat16, "bfloat16"}, {DType::kFloat64, "float64"},
                  {DType::kBFloat16Pure, "bfloat16-pure"})
TANDEM_ENUM_NAMES(Device, 3, {Device::kAuto, "auto"}, {Device::kCpu, "cpu"}, {Device::kCuda, "cuda"})
TANDEM_ENUM_NAMES(Backend, 3, {Backend::kAuto, "auto"}, {Backend::kMpi, "mpi"}, {Backend::kNccl, "nccl"})
TANDEM_ENUM_NAMES(LrSchedule, 3, {LrSchedule::kConstant, "constant"}, {LrSchedule::kCosine, "cosine"},
                  {LrSchedule::kLinear, "linear"})
TANDEM_ENUM_NAMES(LossAggMode, 4, {LossAggMode::kTokenMean, "token-mean"},
                  {LossAggMode::kSeqMeanTokenMean, "seq-mean-token-mean"},
                  {LossAggMode::kSeqMeanTokenSum, "seq-mean-token-sum"},
                  {LossAggMode::kSeqMeanTokenSumNorm, "seq-mean-token-sum-norm"})
TANDEM_ENUM_NAMES(TokenizerKind, 2, {TokenizerKind::kChar, "char"}, {TokenizerKind::kHf, "hf"})
TANDEM_ENUM_NAMES(RatioKind, 2, {RatioKind::kToken, "token"}, {RatioKind::kSequence, "sequence"})
TANDEM_ENUM_NAMES(KlEstimator, 3, {KlEstimator::kK1, "k1"}, {KlEstimator::kK2, "k2"}, {KlEstimator::kK3, "k3"})
TANDEM_ENUM_NAMES(OldLogp, 3, {OldLogp::kRecompute, "recompute"}, {OldLogp::kRollout, "rollout"},
                  {OldLogp::kReuse, "reuse"})
TANDEM_ENUM_NAMES(BatchLayout, 3, {BatchLayout::kAuto, "auto"}, {BatchLayout::kPacked, "packed"},
                  {BatchLayout::kPadded, "padded"})
TANDEM_ENUM_NAMES(CfgGrad, 2, {CfgGrad::kFull, "full"}, {CfgGrad::kCondOnly, "cond_only"})
TANDEM_ENUM_NAMES(AttentionImpl, 3, {AttentionImpl::kAuto, "auto"}, {AttentionImpl::kFused, "fused"},
                  {AttentionImpl::kMaterialised, "materialised"})
TANDEM_ENUM_NAMES(Recompute, 2, {Recompute::kNone, "none"}, {Recompute::kLayers, "layers"})
TANDEM_ENUM_NAMES(RopeType, 3, {RopeType::kNone, "none"}, {RopeType::kLinear, "linear"}, {RopeType::kLlama3, "llama3"})
TANDEM_ENUM_NAMES(ArArch, 2, {ArArch::kLlama, "llama"}, {ArArch::kUnified, "unified"})
TANDEM_ENUM_NAMES(ArBlock, 2, {ArBlock::kLlama, "llama"}, {ArBlock::kGemma3, "gemma3"})
TANDEM_ENUM_NAMES(ImageArch, 2, {ImageArch::kDit, "dit"}, {ImageArch::kShared, "shared"})
TANDEM_ENUM_NAMES(SharePrompt, 2, {SharePrompt::kAuto, "auto"}, {SharePrompt::kOff, "off"})
TANDEM_ENUM_NAMES(EnvSamples, 2, {EnvSamples::kEpisode, "episode"}, {EnvSamples::kTurn, "turn"})
TANDEM_ENUM_NAMES(OptimMoments, 2, {OptimMoments::kFloat32, "float32"}, {OptimMoments::k8bit, "8bit"})
#undef TANDEM_ENUM_NAMES

template <class E>
const char* to_string(E value) {
  for (const auto& [e, name] : EnumNames<E>::kNames)
    if (e == value) return name;
  return "?";
}

template <class E>
std::optional<E> parse_enum(std::string_view text) {
  for (const auto& [e, name] : EnumNames<E>::kNames)
    if (text == name) return e;
  return std::nullopt;
}

// "a|b|c", for error messages.
template <class E>
std::string enum_choices() {
  std::string out;
  for (const auto& [e, name] : EnumNames<E>::kNames) {
    if (!out.empty()) out += '|';
    out += name;
  }
  return out;
}

}  // namespace tandem
