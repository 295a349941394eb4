// Packed THD vs padded collation: same content per sequence, trailing slot masked, positions
// restarting, and a control showing the parity check catches broken position ids.
#include <catch2/catch.hpp>

#include "core/batch/collate.h"

using namespace tandem;

namespace {

ArSample make_sample(std::vector<int64_t> tokens, int64_t prompt_len, double adv, int64_t index) {
  ArSample s;
  s.tokens = std::move(tokens);
  s.prompt_len = prompt_len;
  const int64_t r = s.response_len();
  s.response_mask.assign(r, 1);
  for (int64_t k = 0; k < r; ++k) s.rollout_logp.push_back(-0.1 * (k + 1) - index);
  s.advantage = adv;
  s.index = index;
  return s;
}

std::vector<ArSample> ragged() {
  std::vector<ArSample> v;
  v.push_back(make_sample({1, 2, 3, 4, 5, 6}, 2, 0.5, 0));
  v.push_back(make_sample({7, 8, 9}, 3, -1.0, 1));  // zero-length response
  v.push_back(make_sample({10, 11, 12, 13}, 1, 2.0, 2));
  v.back().response_mask[1] = 0;  // a masked response token (e.g. a tool output)
  v.push_back(make_sample({14}, 1, 0.0, 3));
  return v;
}

std::vector<const ArSample*> ptrs(const std::vector<ArSample>& v) {
  std::vector<const ArSample*> p;
  for (const auto& s : v) p.push_back(&s);
  return p;
}

}  // namespace

TEST_CASE("packed layout: cu_seqlens, restarting positions, shifted targets, trailing slot", "[collate]") {
  const auto samples = ragged();
  const PackedBatch p = collate_packed(ptrs(samples), {10, 3, 8}, torch::kFloat64);
  CHECK(p.num_seqs() == 4);
  CHECK(p.num_tokens() == 14);
  CHECK(p.max_seqlen == 6);
  CHECK(torch::equal(p.cu_seqlens, torch::tensor({0, 6, 9, 13, 14}, torch::kInt32)));
  CHECK(p.cu_seqlens.scalar_type() == torch::kInt32);
  CHECK(torch::equal(p.position_ids.view({-1}),
                     torch::tensor({0, 1, 2, 3, 4, 5, 0, 1, 2, 0, 1, 2, 3, 0}, torch::kInt64)));
  // Sequence 0: prompt {1,2}, response {3,4,5,6}: positions 1..4 predict actions; 5 is the slot.
  CHECK(torch::equal(p.targets.slice(0, 0, 6), torch::tensor({2, 3, 4, 5, 6, 0}, torch::kInt64)));
  CHECK(torch::equal(p.loss_mask.slice(0, 0, 6), torch::tensor({0., 1., 1., 1., 1., 0.}, torch::kFloat64)));
  CHECK(p.rollout_logp[1].item<double>() == Approx(-0.1));
  CHECK(p.rollout_logp[4].item<double>() == Approx(-0.4));
  // Every sequence's last position is a masked trailing slot with target 0.
  for (int64_t b = 0; b < p.num_seqs(); ++b) {
    const int64_t last = p.cu_seqlens[b + 1].item<int32_t>() - 1;
    CHECK(p.loss_mask[last].item<double>() == 0.0);
    CHECK(p.targets[last].item<int64_t>() == 0);
  }
  // The zero-length response and the single-token sequence carry no action.
  CHECK(p.loss_mask.slice(0, 6, 9).sum().item<double>() == 0.0);
  CHECK(p.loss_mask[13].item<double>() == 0.0);
  // The masked response token: sequence 2 (prompt {10}) predicts 11, 12(masked), 13.
  CHECK(torch::equal(p.loss_mask.slice(0, 9, 13), torch::tensor({1., 0., 1., 0.}, torch::kFloat64)));
  CHECK(torch::equal(p.seq_index, torch::tensor({0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3}, torch::kInt64)));
  CHECK(p.advantages[10].item<double>() == 2.0);
  CHECK(p.denominators.n_tok == 10);
}

TEST_CASE("packed and padded layouts carry identical content per sequence", "[collate]") {
  const auto samples = ragged();
  const PackedBatch p = collate_packed(ptrs(samples), {}, torch::kFloat32);
  const PaddedBatch d = collate_padded(ptrs(samples), {}, torch::kFloat32);
  CHECK(d.input_ids.sizes() == torch::IntArrayRef({4, 6}));
  CHECK(packed_padded_mismatch(p, d).empty());
  CHECK(d.loss_mask.sum().item<float>() == p.loss_mask.sum().item<float>());
  // Padding positions are inert.
  CHECK(d.loss_mask.masked_select(d.attention_mask.logical_not()).sum().item<float>() == 0.0f);
}

TEST_CASE("control: parity catches position ids that do not restart", "[collate]") {
  const auto samples = ragged();
  PackedBatch p = collate_packed(ptrs(samples), {}, torch::kFloat64);
  const PaddedBatch d = collate_padded(ptrs(samples), {}, torch::kFloat64);
  p.position_ids = torch::arange(p.num_tokens(), torch::kInt64).view({1, -1});  // the classic packing bug
  CHECK(packed_padded_mismatch(p, d) == "position_ids differs");
  PackedBatch q = collate_packed(ptrs(samples), {}, torch::kFloat64);
  q.loss_mask = q.loss_mask.roll(1);  // mask shifted by one: another classic
  CHECK(packed_padded_mismatch(q, d) == "loss_mask differs");
}

TEST_CASE("empty micro gives well-formed empty batches", "[collate]") {
  const PackedBatch p = collate_packed({}, {}, torch::kFloat32);
  CHECK(p.num_seqs() == 0);
  CHECK(p.num_tokens() == 0);
  CHECK(p.cu_seqlens.numel() == 1);
  CHECK(p.loss_mask.numel() == 0);
  const PaddedBatch d = collate_padded({}, {}, torch::kFloat32);
  CHECK(d.input_ids.size(0) == 0);
  CHECK(packed_padded_mismatch(p, d).empty());
}

TEST_CASE("unpack_to_padded round-trips per-token tensors", "[collate]") {
  const torch::Tensor cu = torch::tensor({0, 2, 5}, torch::kInt32);
  const torch::Tensor x = torch::arange(5, torch::kFloat64) + 1;
  const torch::Tensor out = unpack_to_padded(x, cu, 3);
  CHECK(torch::equal(out, torch::tensor({1., 2., 0., 3., 4., 5.}, torch::kFloat64).view({2, 3})));
}

TEST_CASE("inconsistent samples are rejected", "[collate]") {
  ArSample s = make_sample({1, 2, 3}, 1, 0, 0);
  s.response_mask.pop_back();
  CHECK_THROWS_AS(collate_packed({&s}, {}, torch::kFloat32), std::invalid_argument);
}

TEST_CASE("collate_packed with shared prompts: the prompt once, each response continuing it", "[collate][share]") {
  ArSample a = make_sample({1, 2, 3, 4, 10, 11}, 4, 0.5, 0), b = make_sample({1, 2, 3, 4, 20}, 4, -0.5, 1),
           c = make_sample({9, 8, 30}, 2, 1.0, 2);
  a.group_id = b.group_id = 7, c.group_id = 8;
  const PackedBatch p = collate_packed({&a, &b, &c}, {}, torch::kFloat64, true);
  // [1 2 3] [4 10 11] [4 20] [9 8 30]: the prompt but its last token once, then each response led
  // by the prompt's last token, positions going on after the prompt; c stands alone.
  CHECK(torch::equal(p.input_ids.view({-1}), torch::tensor({1, 2, 3, 4, 10, 11, 4, 20, 9, 8, 30}, torch::kInt64)));
  CHECK(torch::equal(p.position_ids.view({-1}), torch::tensor({0, 1, 2, 3, 4, 5, 3, 4, 0, 1, 2}, torch::kInt64)));
  CHECK(torch::equal(p.cu_seqlens, torch::tensor({0, 3, 6, 8, 11}, torch::kInt32)));
  CHECK(torch::equal(p.prefix_of, torch::tensor({-1, 0, 0, -1}, torch::kInt64)));
  CHECK(torch::equal(p.targets, torch::tensor({2, 3, 4, 10, 11, 0, 20, 0, 8, 30, 0}, torch::kInt64)));
  CHECK(torch::equal(p.loss_mask, torch::tensor({0., 0., 0., 1., 1., 0., 1., 0., 0., 1., 0.}, torch::kFloat64)));
  CHECK(torch::equal(p.seq_index, torch::tensor({0, 0, 0, 0, 0, 0, 1, 1, 2, 2, 2}, torch::kInt64)));
  // The action tokens' fields are those of the unshared layout, in the same order.
  const PackedBatch u = collate_packed({&a, &b, &c}, {}, torch::kFloat64, false);
  CHECK_FALSE(u.prefix_of.defined());
  const auto actions = [](const PackedBatch& x, const torch::Tensor& t) { return t.masked_select(x.loss_mask != 0); };
  CHECK(torch::equal(actions(p, p.targets), actions(u, u.targets)));
  CHECK(torch::equal(actions(p, p.advantages), actions(u, u.advantages)));
  CHECK(torch::equal(actions(p, p.rollout_logp), actions(u, u.rollout_logp)));
  // Other prompts or groups are not shared.
  ArSample d = make_sample({1, 2, 3, 5, 10}, 4, 0.5, 3);
  d.group_id = 7;
  CHECK_FALSE(collate_packed({&a, &d}, {}, torch::kFloat64, true).prefix_of.defined());
}
