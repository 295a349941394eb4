// The sampler's copies of bf16 linear weights in oneDNN's blocked layout, on hosts whose cores
// have bf16 dot products (AVX512-BF16, AMX). ATen's bf16 linear on the host hands oneDNN the plain
// (out, in) weight, which oneDNN reorders into its blocked layout inside every call; at a decode
// step's few rows that reorder costs as much as the product (Qwen2-0.5B shape, 16 rows, bf16, 2
// threads: a decode step's GEMMs 82 ms plain, 50 ms packed with q/k/v and gate/up one GEMM each).
// A copy is made at a layer's first sampling call and kept while any thread is inside a sampling
// scope (SamplingGuard); when the last scope ends every copy is released, so the copies cost memory
// only during a rollout, and a weight written by any means between rollouts (an update, a
// broadcast, a load) is packed afresh. Inside a scope a copy is rebuilt when a weight's storage or
// version changes. Sampling only: the training and scoring forwards keep ATen's linear, whose bits
// recomputed old log-probs must reproduce.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "common/scoped_value.h"

namespace tandem::parallel {

// Whether this host packs: LibTorch built with oneDNN and it enabled, AVX512-BF16 (or AMX) present, and
// TANDEM_PACKED_SAMPLING not 0 (the switch `bench rollout` and the benchmarks compare against).
bool packed_sampling_supported();

// Turns packing off (or back on) on this thread for a scope: ATen's linear, as before.
class PackedSamplingGuard : ScopedValue<bool> {
 public:
  explicit PackedSamplingGuard(bool enabled);
};

// One layer's packed copy: the rows of one or more weights (out_i, in) concatenated, so a fused
// projection's blocks are one GEMM. Owned by the layer; safe to use from several threads.
class PackedWeight {
 public:
  PackedWeight() = default;
  PackedWeight(const PackedWeight&) = delete;
  PackedWeight& operator=(const PackedWeight&) = delete;
  ~PackedWeight();

  // The packed (sum out_i, in) copy of the weights, built or rebuilt as above; undefined where it
  // does not apply (not inside a sampling scope, not all bf16 host tensors of one in, this host or
  // thread does not pack). A handle: it stays valid when the copy is released or rebuilt.
  torch::Tensor of(const std::vector<torch::Tensor>& weights);
  int64_t builds() const;  // how many times of() packed
  bool held() const;       // whether a copy is held now

 private:
  friend void leave_packed_scope();
  friend int64_t packed_bytes_held();

  torch::Tensor packed_;
  // Each weight's storage, held while the copy is (so its address cannot come back as another
  // storage's and pass for it), data pointer, version and rows when packed.
  std::vector<c10::Storage> storages_;
  std::vector<const void*> data_;
  std::vector<int64_t> versions_, rows_;
  int64_t builds_ = 0;
};

// x2 (M, in) @ W^T (+ bias) through a packed copy from PackedWeight::of: (M, sum out_i), x2's dtype.
torch::Tensor packed_linear(const torch::Tensor& x2, const torch::Tensor& packed, const torch::Tensor& bias);

// Keeps the copies for its lifetime, as a sampling scope does, without entering one: a sampler
// whose decode steps are separate scopes (TurnSampler, between an episode's turns) holds one.
class PackedScope {
 public:
  PackedScope();
  ~PackedScope();
  PackedScope(const PackedScope&) = delete;
  PackedScope& operator=(const PackedScope&) = delete;
};

// The sampling scope's count across threads (SamplingGuard's outermost entry and exit on a
// thread): the copies are released when it returns to 0.
void enter_packed_scope();
void leave_packed_scope();
int64_t packed_bytes_held();  // the bytes of the copies held now (tests, diagnostics)

}  // namespace tandem::parallel
