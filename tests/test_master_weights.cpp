// MasterWeights: bfloat16 compute with float32 master weights, float32 gradient accumulation and
// float32 AdamW state. The shipped real-model recipe's lr (1e-6) must move the weights as float32
// training does; pure bfloat16 (the control) rounds almost every update away.
#include <catch2/catch.hpp>

#include "core/batch/schedule.h"
#include "core/grpo/master_weights.h"
#include "core/grpo/policy_update.h"
#include "core/policies/llama_policy.h"
#include "loopback_communicator.h"

using namespace tandem;

namespace {

ArSample sample(std::vector<int64_t> tokens, int64_t prompt_len, double adv, int64_t index) {
  ArSample s;
  s.tokens = std::move(tokens);
  s.prompt_len = prompt_len;
  s.response_mask.assign(s.response_len(), 1);
  s.rollout_logp.assign(s.response_len(), -3.0);
  s.advantage = adv;
  s.index = index;
  return s;
}

models::LlamaConfig tiny_config() {
  models::LlamaConfig c;
  c.vocab_size = 64, c.hidden_size = 32, c.num_layers = 2, c.num_heads = 4, c.num_kv_heads = 2;
  c.intermediate_size = 64, c.max_seq_len = 32, c.qkv_bias = true, c.tie_embeddings = true;
  c.initializer_range = 0.02;  // Qwen2's: weights ~0.02, where a 1e-6 step is below half a bf16 ulp
  return c;
}

std::vector<torch::Tensor> flat_copy(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().to(torch::kFloat32).clone());
  return out;
}

enum class Mode { kFloat32, kMixed, kPureBf16 };

// 5 GRPO updates at lr 1e-6 (AdamW, weight decay 0.01, grad clip 1: the shipped recipe's optim)
// from the same starting weights; returns each parameter's change, in float32.
std::vector<torch::Tensor> train_five(Mode mode, std::vector<torch::Tensor>* bf16_model = nullptr,
                                      std::vector<torch::Tensor>* master_out = nullptr) {
  models::LlamaForCausalLM model(tiny_config(), parallel::ParallelContext{}, std::optional<uint64_t>(7));
  model->to(torch::kBFloat16);  // every mode starts from the same bf16-representable weights
  if (mode == Mode::kFloat32) model->to(torch::kFloat32);
  LlamaPolicy policy(model);
  const std::vector<torch::Tensor> start = flat_copy(policy.parameters());
  std::unique_ptr<MasterWeights> master;
  if (mode == Mode::kMixed) master = std::make_unique<MasterWeights>(policy.parameters());
  const std::vector<torch::Tensor> trained = master ? master->master() : policy.parameters();
  torch::optim::AdamW opt(trained, torch::optim::AdamWOptions(1e-6).weight_decay(0.01));
  test::Loopback comm;
  std::vector<ArSample> samples{sample({1, 5, 9, 12, 40, 3, 7, 7}, 3, 0.9, 0), sample({8, 8, 2, 30, 31}, 2, -1.1, 1),
                                sample({60, 61, 62, 63, 10, 11, 12, 13, 14}, 4, 0.4, 2),
                                sample({2, 4, 6, 8, 10, 12}, 2, -0.2, 3)};
  std::vector<const ArSample*> ptrs;
  for (const auto& s : samples) ptrs.push_back(&s);
  LossDenominators den{0, 4, 8};
  for (const auto& s : samples) den.n_tok += static_cast<double>(s.response_len());
  UpdateOptions o;
  o.dtype = mode == Mode::kFloat32 ? torch::kFloat32 : torch::kBFloat16;
  o.reuse_old_logp = true;  // old = the forward's own log-probs: ratio 1, the plain policy gradient
  if (master) o.after_backward = [&] { master->accumulate_grads(); };
  for (int step = 0; step < 5; ++step) {
    // Two micros per update, so accumulation across micros is exercised too.
    train_micro(policy, {ptrs[0], ptrs[1]}, den, o);
    train_micro(policy, {ptrs[2], ptrs[3]}, den, o);
    const StepOutcome out = reduce_and_step(trained, opt, comm, 1.0, true);
    REQUIRE(out.applied);
    if (master) master->copy_to_model();
  }
  std::vector<torch::Tensor> end = flat_copy(trained);
  if (bf16_model) *bf16_model = policy.parameters();
  if (master_out) *master_out = master->master();
  std::vector<torch::Tensor> delta;
  for (size_t i = 0; i < end.size(); ++i) delta.push_back(end[i] - start[i]);
  return delta;
}

double changed_share(const std::vector<torch::Tensor>& delta) {
  double changed = 0, total = 0;
  for (const auto& d : delta) changed += (d != 0).sum().item<double>(), total += static_cast<double>(d.numel());
  return changed / total;
}

}  // namespace

TEST_CASE("master weights: float32 gradient accumulation, the model is the master rounded", "[master_weights]") {
  torch::Tensor p = torch::tensor({0.02f, -0.5f, 1.0f, 3.0f}).to(torch::kBFloat16).set_requires_grad(true);  // (4)
  MasterWeights mw({p});
  REQUIRE(mw.master().size() == 1);
  const torch::Tensor& m = mw.master()[0];
  CHECK(m.scalar_type() == torch::kFloat32);
  CHECK(torch::equal(m, p.detach().to(torch::kFloat32)));
  // Two backwards: each bf16 gradient moves into the float32 accumulator at once.
  const torch::Tensor c1 = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}), c2 = torch::tensor({0.5f, 0.25f, 1.0f, -4.0f});
  (p * c1.to(torch::kBFloat16)).sum().backward();
  mw.accumulate_grads();
  CHECK(!p.grad().defined());
  (p * c2.to(torch::kBFloat16)).sum().backward();
  mw.accumulate_grads();
  CHECK(torch::equal(m.grad(), c1 + c2));
  // An update below half a bf16 ulp stays in the master; the model is the master rounded.
  {
    torch::NoGradGuard no_grad;
    m.add_(1e-6);
  }
  mw.copy_to_model();
  CHECK(torch::equal(p.detach(), m.detach().to(torch::kBFloat16)));
  CHECK(m[0].item<float>() != p[0].item<float>());  // 0.02 + 1e-6 is not a bf16 value
  // While the master is in the model, writes to the model are writes to the master.
  mw.with_master_in_model([&] {
    CHECK(p.scalar_type() == torch::kFloat32);
    CHECK(p.data_ptr() == m.data_ptr());
    torch::NoGradGuard no_grad;
    p.copy_(torch::tensor({0.1f, 0.2f, 0.3f, 0.4f}));
  });
  CHECK(p.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(m.detach(), torch::tensor({0.1f, 0.2f, 0.3f, 0.4f})));
  CHECK(torch::equal(p.detach(), m.detach().to(torch::kBFloat16)));
}

TEST_CASE("bf16 with master weights moves as float32 training at lr 1e-6; pure bf16 does not (control)",
          "[master_weights]") {
  const std::vector<torch::Tensor> f32 = train_five(Mode::kFloat32);
  std::vector<torch::Tensor> model, master;
  const std::vector<torch::Tensor> mixed = train_five(Mode::kMixed, &model, &master);
  const std::vector<torch::Tensor> pure = train_five(Mode::kPureBf16);
  // The relative L2 distance of the mixed run's change from the float32 run's. Adam's steps are
  // ~lr * sign(g), so bf16's noisier gradients change few of them; stated tolerance 0.1.
  double num = 0, den = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    num += (mixed[i] - f32[i]).pow(2).sum().item<double>();
    den += f32[i].pow(2).sum().item<double>();
  }
  const double rel = std::sqrt(num / den);
  const double share_f32 = changed_share(f32), share_mixed = changed_share(mixed), share_pure = changed_share(pure);
  INFO("changed: float32 " << share_f32 << ", mixed " << share_mixed << ", pure bf16 " << share_pure
                           << "; mixed vs float32 relative L2 " << rel);
  CHECK(share_f32 > 0.95);
  CHECK(share_mixed >= 0.99 * share_f32);
  CHECK(rel < 0.1);
  // The bf16 copy is the master rounded, bitwise.
  for (size_t i = 0; i < model.size(); ++i)
    CHECK(torch::equal(model[i].detach(), master[i].detach().to(torch::kBFloat16)));
  // Control: without master weights the same updates mostly round away, so the checks above can fail.
  CHECK(share_pure < 0.5 * share_f32);
}
