// The decode step's adapter product on the host: y += scale * (x A^T) B^T for the few rows a
// decode step has. ATen runs each of these two skinny GEMMs through a oneDNN matmul primitive
// (bf16) at some 20 us a call whatever its size, and a decode step makes two per adapted layer: 336
// a token on the Qwen2-0.5B shape, a seventh of LoRA's rollout. Here both are one register-blocked
// micro-kernel over the factors packed in the order it reads them (PackedFactor keeps those
// copies): after a decode step has streamed ~1 GB of base weights through the caches, the adapters
// come from memory again, and read in place A's rows and B^T's columns are more streams than the
// prefetchers follow. float32 accumulation.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace tandem::parallel {

inline constexpr int64_t kLoraDecodeMaxRows = 64;  // above it, ATen's GEMMs
inline constexpr int64_t kLoraDecodeTile = 32;     // output columns per tile of the packed B

// The instruction sets the kernel is compiled for, each chosen only where the host has it.
enum class LoraDecodeIsa { kBaseline, kAvx2, kAvx512 };
LoraDecodeIsa best_lora_decode_isa();  // this host's best
bool host_supports(LoraDecodeIsa isa);

// A factor w (n, k) packed for add_lora_decode: (ceil(n / kLoraDecodeTile), k, kLoraDecodeTile),
// tile t holding w^T's columns [t * tile, (t + 1) * tile), each tile's k rows contiguous; the last
// tile's columns past n are zeros. A (r, in) packs to tiles of r, B (out, r) to tiles of out.
torch::Tensor pack_for_decode(const torch::Tensor& w);
// The same into packed, already of that shape and w's dtype (a rebuild allocates nothing).
void pack_for_decode_into(const torch::Tensor& packed, const torch::Tensor& w);

// Whether add_lora_decode takes these operands: host tensors, all bf16 or all float32, x
// contiguous (M, in), y (M, out) with contiguous rows at any row stride (a block of a fused
// projection's output), M <= kLoraDecodeMaxRows, packed_a and packed_b from pack_for_decode of an
// (r, in) A and an (out, r) B.
bool lora_decode_applies(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& packed_a,
                         const torch::Tensor& packed_b);

// y (M, out) += scale * (x (M, in) A^T) B^T in place, A and B as pack_for_decode gives them. x A^T
// is kept in float32 (scaled), and each y element is rounded once to its dtype. Each element is
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
