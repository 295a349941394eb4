// Shared by the Llama unit and MPI tests: the fixture directories, ragged batches in both
// layouts, and error measures stated relative to the reference's magnitude.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "models/llama/inputs.h"

namespace tandem::test {

// TANDEM_FIXTURES_DIR in the environment wins over the build's: a packed test binary runs where the
// source tree is elsewhere (scripts/gpu/check.sh on a GPU machine).
inline std::string llama_fixture(const std::string& name) {
  const char* dir = std::getenv("TANDEM_FIXTURES_DIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : TANDEM_FIXTURES_DIR) + "/llama/" + name;
}

// The same sequences in the packed THD layout and the padded (B, T) layout; targets are the next
// token of the same sequence with a trailing 0 slot, as collate builds them.
struct RaggedBatch {
  models::PackedInput packed;
  models::PaddedInput padded;
  torch::Tensor packed_targets;  // (N)
  torch::Tensor padded_targets;  // (B, T)
  torch::Tensor cu;              // (B+1) int64
};

inline RaggedBatch ragged_batch(const std::vector<std::vector<int64_t>>& seqs) {
  std::vector<int64_t> ids, pos, targets, cu{0};
  int64_t width = 0;
  for (const auto& s : seqs) {
    for (size_t j = 0; j < s.size(); ++j) {
      ids.push_back(s[j]);
      pos.push_back(static_cast<int64_t>(j));
      targets.push_back(j + 1 < s.size() ? s[j + 1] : 0);
    }
    cu.push_back(cu.back() + static_cast<int64_t>(s.size()));
    width = std::max<int64_t>(width, static_cast<int64_t>(s.size()));
  }
  RaggedBatch b;
  b.cu = torch::tensor(cu, torch::kInt64);
  b.packed = {torch::tensor(ids, torch::kInt64).view({1, -1}), torch::tensor(pos, torch::kInt64).view({1, -1}),
              b.cu.to(torch::kInt32), width};
  b.packed_targets = torch::tensor(targets, torch::kInt64);
  const int64_t rows = static_cast<int64_t>(seqs.size());
  b.padded = {torch::zeros({rows, width}, torch::kInt64), torch::zeros({rows, width}, torch::kInt64),
              torch::zeros({rows, width}, torch::kBool)};
  b.padded_targets = torch::zeros({rows, width}, torch::kInt64);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t s = cu[i], n = cu[i + 1] - s;
    if (n == 0) continue;
    b.padded.input_ids[i].narrow(0, 0, n).copy_(b.packed.input_ids[0].narrow(0, s, n));
    b.padded.position_ids[i].narrow(0, 0, n).copy_(torch::arange(n));
    b.padded.attention_mask[i].narrow(0, 0, n).fill_(true);
    b.padded_targets[i].narrow(0, 0, n).copy_(b.packed_targets.narrow(0, s, n));
  }
  return b;
}

// Random sequences of the given lengths (deterministic: the same on every rank).
inline std::vector<std::vector<int64_t>> random_sequences(const std::vector<int64_t>& lengths, int64_t vocab,
                                                          uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<std::vector<int64_t>> out;
  for (int64_t n : lengths) {
    const torch::Tensor t = torch::randint(vocab, {n}, gen, torch::kInt64);
    out.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
  }
  return out;
}

inline torch::Tensor random_weights(int64_t n, uint64_t seed, torch::Dtype dtype) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return torch::randn({n}, gen, torch::kFloat64).to(dtype);
}

// max |a - b| / max |b|: the error relative to the reference's largest magnitude.
inline double rel_to_max(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.to(torch::kFloat64), y = b.to(torch::kFloat64);
  if (y.numel() == 0) return 0.0;
  const double scale = std::max(y.abs().max().item<double>(), 1e-300);
  return (x - y).abs().max().item<double>() / scale;
}

// max |a - b| / max(|b|, 1): relative for large entries, absolute below 1 (log-probs).
inline double rel_floor1(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.to(torch::kFloat64), y = b.to(torch::kFloat64);
  if (y.numel() == 0) return 0.0;
  return ((x - y).abs() / y.abs().clamp_min(1.0)).max().item<double>();
}

}  // namespace tandem::test
