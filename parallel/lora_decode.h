// The decode step's adapter product on the host: y += scale * (x A^T) B^T for the few rows a
// decode step has. ATen runs each of these two skinny GEMMs through a oneDNN matmul primitive
// (bf16) at some 20 us a call whatever its size, and a decode step makes two per adapted layer: 336
// a token on the Qwen2-0.5B shape, a seventh of LoRA's rollout. Here both are one register-blocked
// micro-kernel over the factors packed in the order it reads them (PackedFactor keeps those
// copies): after a decode step has streamed ~1 GB of base weights through the caches, the adapters
// come from memory again, and read in place A's rows and B^T's columns are more streams than the
// prefetchers follow. float32 accumulation. Where the host has AMX tiles (Intel from Sapphire
// Rapids on), bf16 factors go through them instead, packed in their layout: the multiply-adds then
// cost next to nothing beside reading the factors.
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "common/scoped_value.h"

namespace tandem::parallel {

inline constexpr int64_t kLoraDecodeMaxRows = 64;  // above it, ATen's GEMMs
inline constexpr int64_t kLoraDecodeTile = 32;     // output columns per tile of the packed B

// The instruction sets the kernel is compiled for, each chosen only where the host has it. kAmx:
// Intel's AMX tiles (tdpbf16ps) for bf16 operands, float32 ones through the AVX-512 kernel.
enum class LoraDecodeIsa { kBaseline, kAvx2, kAvx512, kAmx };
LoraDecodeIsa best_lora_decode_isa();   // this host's best (or LoraDecodeIsaGuard's on this thread)
bool host_supports(LoraDecodeIsa isa);  // kAmx: the CPU has it and Linux grants the tile state

// Makes best_lora_decode_isa() return isa on this thread for a scope (`bench rollout` times the
// AVX-512 kernel beside AMX's); the host must have it. Factors packed for another set are packed
// again at their next use (PackedFactor).
class LoraDecodeIsaGuard : ScopedValue<int> {
 public:
  explicit LoraDecodeIsaGuard(LoraDecodeIsa isa);
};

// A factor w (n, k) packed for add_lora_decode with isa. The vector kernels (and float32 w):
// (ceil(n / kLoraDecodeTile), k, kLoraDecodeTile), tile t holding w^T's columns [t * tile,
// (t + 1) * tile), each tile's k rows contiguous; the last tile's columns past n are zeros. kAmx
// with bf16 w: the tiles' pair-interleaved operand layout, (ceil(n / 16), ceil(k / 32), 16, 32),
// block [b][q] holding w[16 b + c][32 q + 2 p + e] at [p][2 c + e], zeros past n and k. A (r, in)
// packs to blocks of r, B (out, r) to blocks of out.
torch::Tensor pack_for_decode(const torch::Tensor& w, LoraDecodeIsa isa = best_lora_decode_isa());
// The same into packed, already of one of those shapes and w's dtype (a rebuild allocates nothing).
void pack_for_decode_into(const torch::Tensor& packed, const torch::Tensor& w);

// Whether add_lora_decode takes these operands with isa: host tensors, all bf16 or all float32, x
// contiguous (M, in), y (M, out) with contiguous rows at any row stride (a block of a fused
// projection's output), M <= kLoraDecodeMaxRows, packed_a and packed_b from pack_for_decode(.., isa)
// of an (r, in) A and an (out, r) B.
bool lora_decode_applies(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& packed_a,
                         const torch::Tensor& packed_b, LoraDecodeIsa isa = best_lora_decode_isa());

// y (M, out) += scale * (x (M, in) A^T) B^T in place, A and B as pack_for_decode gives them. x A^T
// is kept in float32 (scaled; AMX multiplies bf16 only, so there as the sum of two bf16 parts,
// hi + lo, within 2^-16 of it), and each y element is rounded once to its dtype. Each element is
// one thread's, its sums in one order, so the result is bitwise the same at any thread count.
// Requires lora_decode_applies.
void add_lora_decode(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& packed_a,
                     const torch::Tensor& packed_b, double scale, LoraDecodeIsa isa = best_lora_decode_isa());

// pack_for_decode(w) kept between decode steps: rebuilt when w's storage or version counter
// changes or a new sampling scope begins (SamplingGuard; the adapters change only between
// rollouts), so a write through a tensor that does not share w's version counter is caught at the
// next rollout at the latest. Holds about w's size once used: the adapters once more in all.
class PackedFactor {
 public:
  const torch::Tensor& of(const torch::Tensor& w);  // w (n, k) -> pack_for_decode(w)
  int64_t builds() const { return builds_; }        // how many times of() packed it

 private:
  torch::Tensor packed_;
  const void* data_ = nullptr;
  int64_t version_ = -1;
  uint64_t scope_ = 0;
  int64_t builds_ = 0;
};

// Counts sampling scopes (SamplingGuard calls it on entry).
void begin_sampling_scope();

}  // namespace tandem::parallel
