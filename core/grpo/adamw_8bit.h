// AdamW with 8-bit moments (optim.moments: 8bit): torchao's AdamW8bit, which follows bitsandbytes'
// blockwise scheme (Dettmers et al., "8-bit Optimizers via Block-wise Quantization", 2021). Each
// moment of a parameter is stored as one uint8 code per element into a dynamic quantisation map
// (signed for the first moment, unsigned for the second) and one float32 absmax per block of 256
// elements: about 2 bytes a parameter instead of AdamW's 8. The update itself runs in float32 on
// the dequantised moments, and the parameter moves by the float32 moments of this step before they
// are requantised (as torchao does). Tensors under 4,096 elements or not a multiple of 256 keep
// float32 moments (torchao's and bitsandbytes' rule). Departure from torchao: the learning rate
// is the group's double rounded to float32 each step (torchao keeps a float32 tensor).
#pragma once

#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tandem {

inline constexpr int64_t kMomentBlock = 256;         // elements per absmax
inline constexpr int64_t kMinQuantizedNumel = 4096;  // smaller tensors keep float32 moments

// bitsandbytes' create_dynamic_map(signed, max_exponent_bits 7, total_bits 8): 256 sorted float32
// values; signed spans [-0.993, 1], unsigned [0, 1].
torch::Tensor dynamic_map(bool is_signed);  // (256,) float32

// A moment quantised blockwise: x ~= qmap[codes] * scale[block].
struct BlockwiseCodes {
  torch::Tensor codes;  // uint8, x's shape
  torch::Tensor scale;  // (numel / kMomentBlock,) float32, each block's absmax (at least 1e-12)
};

// The host pass's nearest map entry of a scaled moment, as torchao picks it: the last entry <= x
// (entry 0 below the map, and for NaN), then up when x is at least half-way to the next one.
// torchao finds the entry with an eight-step branchless binary search (by_search); this reads the
// search's answer for x's top 16 bits from a 64 KiB table and steps along the map from there.
class NearestCode {
 public:
  explicit NearestCode(const torch::Tensor& qmap);  // (256,) float32, sorted
  uint8_t operator()(float x) const {
    int c = std::isnan(x) ? 0 : floor_[std::bit_cast<uint32_t>(x) >> 16];
    while (c < 255 && x >= q_[c + 1]) ++c;
    return round_up(x, c);
  }
  uint8_t by_search(float x) const;                     // torchao's search and rounding, for the tests
  float value(uint8_t code) const { return q_[code]; }  // the map entry a code stands for

 private:
  int search(float x) const;
  uint8_t round_up(float x, int c) const;
  torch::Tensor qmap_;
  const float* q_;
  std::vector<uint8_t> floor_;  // per top-16-bit prefix, the search's answer for its lowest float
};

// Whether a parameter's moments are quantised.
bool quantizes_moments(const torch::Tensor& param);

// Nearest map entry of x / absmax per block (ties up). x: float32, numel a multiple of kMomentBlock.
BlockwiseCodes quantize_blockwise(const torch::Tensor& x, const torch::Tensor& qmap);
torch::Tensor dequantize_blockwise(const BlockwiseCodes& q, const torch::Tensor& qmap);  // float32

class AdamW8bit : public torch::optim::Optimizer {
 public:
  // host_kernel: float32 parameters on the host step in fused passes per block; false runs the
  // tensor-op form that other devices and dtypes run, so tests can hold both to torchao.
  AdamW8bit(const std::vector<torch::Tensor>& params, const torch::optim::AdamWOptions& options,
            bool host_kernel = true);

  torch::Tensor step(LossClosure closure = nullptr) override;
  // The moments, per parameter in group order: step, then codes + scales or float32 tensors.
  // load checks every tensor's presence, dtype and shape against this optimizer's parameters.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  // Bytes of moment state held now (codes, scales, float32 moments).
  int64_t state_bytes() const;
  // Zero moments for every parameter that has none yet, as its first step would create them
  // (core/grpo/adamw_state.h says why).
  void allocate_state();

 private:
  struct Moments {
    int64_t step = 0;
    torch::Tensor exp_avg, exp_avg_sq;       // float32, when not quantised
    BlockwiseCodes exp_avg_q, exp_avg_sq_q;  // when quantised
  };
  std::vector<torch::Tensor> all_params() const;
  static void zero_moments(Moments& s, const torch::Tensor& p);  // when s has none

  std::vector<Moments> moments_;  // all_params() order
  torch::Tensor qmap_signed_, qmap_unsigned_;
  NearestCode code_signed_, code_unsigned_;  // the host pass's code search
  bool host_kernel_;
};

}  // namespace tandem
