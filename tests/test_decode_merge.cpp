// decode_merge.h's host loops against the tensor ops they replace (attention_core.cpp's fused
// decode before them): the readers' regrouping bitwise, the merge bitwise in float64 and float32
// and within one rounding in bf16, each with a control that the comparison can fail.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <limits>
#include <vector>

#include "models/llama/decode_merge.h"

using namespace tandem::models;

namespace {

// Three groups of widths 2, 3 and 1 (m_max 3, padding readers), sequences 2 and 6 in none.
const std::vector<int64_t> kGather{5, 0, 8, 1, 3, 4, 7, 8, 8};  // (g m_max), 8 = n: padding
constexpr int64_t kN = 8, kGroups = 3, kWidest = 3, kKvHeads = 2, kGroup = 3, kDim = 5;

torch::Tensor gather_t() { return torch::tensor(kGather, torch::kInt64); }

// Each sequence's group position, g m_max when it reads no prefix.
torch::Tensor place_t() {
  std::vector<int64_t> place(kN, kGroups * kWidest);
  for (int64_t r = 0; r < kGroups * kWidest; ++r)
    if (kGather[r] < kN) place[kGather[r]] = r;
  return torch::tensor(place, torch::kInt64);
}

// The ops fused_decode ran before: a zero row, index_select, permute, reshape.
torch::Tensor to_groups(const torch::Tensor& x) {
  const torch::Tensor padded = torch::cat({x, torch::zeros({1, kKvHeads, kGroup, x.size(3)}, x.options())});
  return padded.index_select(0, gather_t())
      .view({kGroups, kWidest, kKvHeads, kGroup, x.size(3)})
      .permute({0, 2, 1, 3, 4})
      .reshape({kGroups, kKvHeads, kWidest * kGroup, x.size(3)});
}
torch::Tensor to_sequences(const torch::Tensor& x, double fill) {
  const torch::Tensor rows = x.view({kGroups, kKvHeads, kWidest, kGroup, x.size(3)})
                                 .permute({0, 2, 1, 3, 4})
                                 .reshape({kGroups * kWidest, kKvHeads, kGroup, x.size(3)});
  const torch::Tensor none = torch::full({1, kKvHeads, kGroup, x.size(3)}, fill, x.options());
  return torch::cat({rows, none}).index_select(0, place_t());
}
torch::Tensor merge_reference(const torch::Tensor& own, const torch::Tensor& own_lse, const torch::Tensor& pre,
                              const torch::Tensor& pre_lse) {
  const torch::Tensor l1 = own_lse.unsqueeze(-1);
  const torch::Tensor l2 = to_sequences(pre_lse.unsqueeze(-1), -std::numeric_limits<double>::infinity());
  const torch::Tensor lse = torch::logaddexp(l1, l2);
  const torch::ScalarType ct = lse.scalar_type();
  const torch::Tensor out = own.to(ct) * (l1 - lse).exp_() + to_sequences(pre, 0).to(ct) * (l2 - lse).exp_();
  return out.to(own.scalar_type()).view({kN, kKvHeads * kGroup, own.size(3)});
}

}  // namespace

TEST_CASE("gather_readers: the sequences' rows in their groups, padding readers zero", "[attention][decode_merge]") {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32, torch::kBFloat16}) {
    INFO("dtype " << c10::toString(dtype));
    // A non-contiguous input, as the query view of a fused projection's output can be.
    const torch::Tensor x = torch::randn({kN, kKvHeads, kGroup, kDim + 2}).to(dtype).narrow(3, 1, kDim);
    CHECK(torch::equal(gather_readers(x, gather_t(), kGroups, kWidest), to_groups(x)));
    std::vector<int64_t> moved = kGather;
    std::swap(moved[0], moved[1]);  // control: another reader order is another tensor
    CHECK_FALSE(torch::equal(gather_readers(x, torch::tensor(moved, torch::kInt64), kGroups, kWidest), to_groups(x)));
  }
  CHECK_THROWS_WITH(gather_readers(torch::zeros({kN, kKvHeads, kGroup, kDim}),
                                   torch::full({kGroups * kWidest}, kN + 1, torch::kInt64), kGroups, kWidest),
                    Catch::Contains("outside"));
}

TEST_CASE("merge_by_lse: the two parts merged as the tensor ops merged them", "[attention][decode_merge]") {
  torch::manual_seed(3);
  for (const auto& [dtype, lse_dtype] :
       {std::pair{torch::kFloat64, torch::kFloat64}, std::pair{torch::kFloat32, torch::kFloat32},
        std::pair{torch::kBFloat16, torch::kFloat32}}) {
    INFO("dtype " << c10::toString(dtype));
    const torch::Tensor own = torch::randn({kN, kKvHeads, kGroup, kDim}).to(dtype);
    const torch::Tensor pre = torch::randn({kGroups, kKvHeads, kWidest * kGroup, kDim}).to(dtype);
    const torch::Tensor own_lse = (torch::randn({kN, kKvHeads, kGroup}) * 3).to(lse_dtype);
    const torch::Tensor pre_lse = (torch::randn({kGroups, kKvHeads, kWidest * kGroup}) * 3).to(lse_dtype);
    const torch::Tensor got = merge_by_lse(own, own_lse, pre, pre_lse, place_t(), kWidest);
    const torch::Tensor want = merge_reference(own, own_lse, pre, pre_lse);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(got.scalar_type() == dtype);
    // ATen's vectorised exp and log1p may differ from the C library's in the last bit.
    const double tol = dtype == torch::kFloat64 ? 1e-14 : dtype == torch::kFloat32 ? 1e-6 : 1e-2;
    CHECK((got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>() <= tol);
    // Sequences in no group keep their own rows exactly.
    for (const int64_t i : {2, 6}) CHECK(torch::equal(got[i], own[i].reshape({kKvHeads * kGroup, kDim})));
    // Control: the prefix part weighs in (sequence 0 reads group 0's second row).
    CHECK((got[0].to(torch::kFloat64) - own[0].reshape({kKvHeads * kGroup, kDim}).to(torch::kFloat64))
              .abs()
              .max()
              .item<double>() > 1e-2);
  }
}
