// The unified model in the engine (core/unified_policy.h, models/unified/flow.h, generate.h):
// packed log-probs equal padded ones and the model's own logits; the text sampler's log-probs are
// what the training forward computes, and a sample does not depend on its batch; the image side
// reads labels as their text prompts, batch-independently; class prompts need a tokenizer that
// can write them. LoRA on it (tracks.ar.lora, arch unified): both heads against the plain model with
// W + s B A in its weights, the chain rule, the adapters-off reference and the directories. Each
// numeric check has a control that breaks it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "core/batch/collate.h"
#include "core/policies/unified_policy.h"
#include "models/safetensors.h"
#include "models/unified/flow.h"
#include "models/unified/generate.h"

using namespace tandem;

namespace {

models::UnifiedConfig tiny_config() {
  models::UnifiedConfig c;
  c.vocab_size = 40, c.hidden_size = 16, c.num_layers = 2, c.num_heads = 2, c.intermediate_size = 32;
  c.max_text_len = 16, c.image_size = 8, c.channels = 3, c.patch_size = 4;
  return c;
}

models::UnifiedModel tiny_model(uint64_t seed = 3) {
  models::UnifiedModel m(tiny_config(), seed);
  m->to(torch::kFloat64);
  return m;
}

ArSample sample(std::vector<int64_t> tokens, int64_t prompt_len) {
  ArSample s;
  s.tokens = std::move(tokens);
  s.prompt_len = prompt_len;
  s.response_mask.assign(s.tokens.size() - static_cast<size_t>(prompt_len), 1);
  s.rollout_logp.assign(s.response_mask.size(), 0.0);
  return s;
}

double max_abs(const torch::Tensor& t) { return t.numel() ? t.abs().max().item<double>() : 0.0; }

}  // namespace

TEST_CASE("unified policy: packed log-probs equal padded ones and the model's logits (float64 1e-12)",
          "[unified_policy]") {
  UnifiedTextPolicy policy(tiny_model());
  const ArSample a = sample({1, 5, 9, 12, 3}, 2), b = sample({7, 2, 30}, 1), c = sample({4, 4, 4, 4, 8, 11, 2}, 3);
  const std::vector<const ArSample*> rows{&a, &b, &c};
  const PackedBatch packed = collate_packed(rows, {}, torch::kFloat64);
  const PaddedBatch padded = collate_padded(rows, {}, torch::kFloat64);
  const auto p = policy.forward_packed(packed, true);
  const auto q = policy.forward_padded(padded, true);
  const torch::Tensor q_on_packed = q.logp.masked_select(padded.attention_mask);  // (N)
  CHECK(p.logp.sizes() == packed.targets.sizes());
  CHECK(max_abs(p.logp - q_on_packed) <= 1e-12);
  CHECK(max_abs(p.entropy - q.entropy.masked_select(padded.attention_mask)) <= 1e-12);
  // The reference: each sequence alone through the model's text head.
  std::vector<torch::Tensor> ref;
  for (const ArSample* s : rows) {
    const torch::Tensor ids = torch::tensor(s->tokens, torch::kInt64).unsqueeze(0);  // (1, T)
    const torch::Tensor lp = torch::log_softmax(policy.model()->text_logits(ids, torch::tensor({ids.size(1)})), -1)[0];
    for (size_t t = 0; t + 1 < s->tokens.size(); ++t) ref.push_back(lp[static_cast<int64_t>(t)][s->tokens[t + 1]]);
    ref.push_back(lp[static_cast<int64_t>(s->tokens.size() - 1)][0]);  // the trailing slot's target is 0
  }
  CHECK(max_abs(p.logp - torch::stack(ref)) <= 1e-12);
  // Control: another model's log-probs are far off.
  UnifiedTextPolicy other(tiny_model(4));
  CHECK(max_abs(other.forward_packed(packed, false).logp - p.logp) > 1e-3);
}

TEST_CASE("unified sampler: log-probs are the training forward's, samples do not depend on their batch",
          "[unified_policy]") {
  UnifiedTextPolicy policy(tiny_model());
  models::SamplingParams sp;
  sp.max_new_tokens = 5;
  sp.stop_ids = {2};
  const std::vector<models::GenerationRequest> both{{{1, 5, 9}, 11}, {{7, 3}, 12}};
  const auto g = policy.generate(both, sp);
  REQUIRE(g.size() == 2);
  const auto alone = policy.generate({both[1]}, sp);
  CHECK(alone[0].tokens == g[1].tokens);  // its own stream, whatever shares the batch
  for (size_t r = 0; r < g.size(); ++r) {
    REQUIRE(!g[r].tokens.empty());
    const bool stopped = g[r].tokens.back() == 2;
    CHECK(g[r].stopped == stopped);
    CHECK((stopped || static_cast<int64_t>(g[r].tokens.size()) == sp.max_new_tokens));
    std::vector<int64_t> full = both[r].prompt;
    full.insert(full.end(), g[r].tokens.begin(), g[r].tokens.end());
    const ArSample s = sample(full, static_cast<int64_t>(both[r].prompt.size()));
    const PackedBatch b = collate_packed({&s}, {}, torch::kFloat64);
    const torch::Tensor lp = policy.forward_packed(b, false).logp;  // (N)
    const torch::Tensor sampled = torch::tensor(g[r].logp, torch::kFloat64);
    const int64_t first = static_cast<int64_t>(both[r].prompt.size()) - 1;
    CHECK(max_abs(lp.narrow(0, first, sampled.numel()) - sampled) <= 1e-12);
    // Control: shifted by one slot they disagree.
    CHECK(max_abs(lp.narrow(0, first - 1, sampled.numel()) - sampled) > 1e-6);
  }
  sp.temperature = 0;  // greedy is reproducible across seeds
  CHECK(policy.generate({{{1, 5, 9}, 1}}, sp)[0].tokens == policy.generate({{{1, 5, 9}, 99}}, sp)[0].tokens);
  models::SamplingParams too_long = sp;
  too_long.max_new_tokens = 15;
  CHECK_THROWS_AS(policy.generate({{{1, 5, 9}, 1}}, too_long), UserError);  // 3 + 15 > max_text_len 16
}

TEST_CASE("unified flow: a label is its text prompt, the null label the empty one, batch-independently",
          "[unified_policy]") {
  models::UnifiedModel model = tiny_model();
  const std::vector<std::vector<int64_t>> prompts{{1, 6, 7}, {1, 8}};
  models::UnifiedFlow flow(model, prompts);
  CHECK(flow.null_label() == 2);
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({3, 3, 8, 8}, torch::kFloat64);          // (B, C, H, W)
  const torch::Tensor sigma = torch::tensor({0.9, 0.5, 0.2}, torch::kFloat64);  // (B)
  const torch::Tensor v = flow.velocity(x, sigma, torch::tensor({1, 0, 2}));    // (B, C, H, W)
  const torch::Tensor direct =
      model->velocity(torch::tensor({{1, 8}}), torch::tensor({2}), x.slice(0, 0, 1), sigma.slice(0, 0, 1));
  CHECK(max_abs(v.slice(0, 0, 1) - direct) <= 1e-12);
  const torch::Tensor uncond =
      model->velocity(torch::zeros({1, 0}, torch::kInt64), torch::tensor({0}), x.slice(0, 2, 3), sigma.slice(0, 2, 3));
  CHECK(max_abs(v.slice(0, 2, 3) - uncond) <= 1e-12);
  const torch::Tensor single = flow.velocity(x.slice(0, 1, 2), sigma.slice(0, 1, 2), torch::tensor({0}));
  // Every batch is padded to the same text width, so a row's arithmetic is the same alone or in a
  // batch of 3, but BLAS may block the two GEMM shapes differently (OpenBLAS's Haswell kernels on
  // AMD EPYC do): equal up to float reassociation, float64 1e-12.
  CHECK(max_abs(single - v.slice(0, 1, 2)) <= 1e-12);
  // Control: the other prompt draws something else.
  CHECK(max_abs(flow.velocity(x.slice(0, 1, 2), sigma.slice(0, 1, 2), torch::tensor({1})) - single) > 1e-6);
  CHECK_THROWS_AS(models::UnifiedFlow(model, {{}}), UserError);
  CHECK_THROWS_AS(models::UnifiedFlow(model, {{1, 99}}), UserError);
}

TEST_CASE("class prompts are 'draw <class>' in the AR tokenizer", "[unified_policy]") {
  const auto tok = models::make_char_tokenizer("0123456789+-*=:;,.<>|# abcdefghijklmnopqrstuvwxyz");
  const auto p = class_prompts(*tok, 3);
  REQUIRE(p.size() == 3);
  CHECK(class_prompt_text(2) == "draw triangle");
  std::vector<int64_t> body(p[2].begin() + (tok->bos_id() ? 1 : 0), p[2].end());
  CHECK(tok->decode(body, true) == "draw triangle");
  const auto digits = models::make_char_tokenizer("0123456789");
  CHECK_THROWS_WITH(class_prompts(*digits, 2), Catch::Contains("tracks.ar.tokenizer"));
}

namespace {

// A tiny float64 unified model with rank-2 adapters on all seven projections, B random too (peft's
// zero B would hide its role), and a plain model holding the same base.
struct LoraPair {
  models::UnifiedModel adapted{nullptr}, plain{nullptr};
  models::LoraSpec spec{2, 6.0, models::lora_unified_names()};
};
LoraPair lora_pair() {
  LoraPair p;
  p.adapted = tiny_model(5);
  p.plain = tiny_model(5);  // the same seed: the same base weights
  models::attach_lora(*p.adapted, p.spec, 9);
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(6);
  for (auto& item : p.adapted->named_parameters())
    if (item.key().find("lora_B") != std::string::npos)
      item.value().copy_(torch::randn(item.value().sizes(), gen, torch::kFloat64));
  return p;
}

// Every adapted layer: (module path, layer).
std::vector<std::pair<std::string, models::LoraLinearImpl*>> adapted_layers(models::UnifiedModelImpl& m) {
  std::vector<std::pair<std::string, models::LoraLinearImpl*>> out;
  for (const auto& item : m.named_modules("", false))
    if (auto* l = dynamic_cast<models::LoraLinearImpl*>(item.value().get()); l && l->lora().defined())
      out.emplace_back(item.key(), l);
  return out;
}

models::UnifiedInput both_heads() {
  at::Generator gen = at::detail::createCPUGenerator(8);
  models::UnifiedInput in;
  in.text_ids = torch::randint(0, 40, {2, 5}, gen, torch::kInt64);
  in.text_lengths = torch::tensor({5, 3}, torch::kInt64);
  in.x_t = torch::randn({2, 3, 8, 8}, gen, torch::kFloat64);
  in.sigma = torch::tensor({0.3, 0.8}, torch::kFloat64);
  return in;
}

}  // namespace

TEST_CASE("unified LoRA: both heads compute W x + s B A x; the adapters' gradients follow the chain rule",
          "[unified_policy][lora]") {
  LoraPair p = lora_pair();
  const auto layers = adapted_layers(*p.adapted);
  CHECK(layers.size() == 7 * 2);  // q/k/v/o and gate/up/down of both blocks; nothing else
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, l] : layers)
      dynamic_cast<torch::nn::LinearImpl*>(p.plain->named_modules()[name].get())
          ->weight.add_(torch::matmul(l->lora().b, l->lora().a) * p.spec.scale());
  }
  const models::UnifiedInput in = both_heads();
  const models::UnifiedOutput got = p.adapted->forward(in), want = p.plain->forward(in);
  CHECK(max_abs(got.text_logits - want.text_logits) < 1e-12);
  CHECK(max_abs(got.velocity - want.velocity) < 1e-12);
  // Control: the adapters move both heads (a forward that skipped them would fail above).
  const models::UnifiedOutput base = tiny_model(5)->forward(in);
  CHECK(max_abs(got.text_logits - base.text_logits) > 1e-3);
  CHECK(max_abs(got.velocity - base.velocity) > 1e-3);

  const torch::Tensor gt = torch::randn(got.text_logits.sizes(), at::detail::createCPUGenerator(2), torch::kFloat64);
  const torch::Tensor gv = torch::randn(got.velocity.sizes(), at::detail::createCPUGenerator(3), torch::kFloat64);
  ((got.text_logits * gt).sum() + (got.velocity * gv).sum()).backward();
  ((want.text_logits * gt).sum() + (want.velocity * gv).sum()).backward();
  for (auto& [name, l] : layers) {
    const torch::Tensor dw =
        dynamic_cast<torch::nn::LinearImpl*>(p.plain->named_modules()[name].get())->weight.grad();  // (out, in)
    INFO(name);
    CHECK(max_abs(l->lora().a.grad() - p.spec.scale() * torch::matmul(l->lora().b.t(), dw)) < 1e-10);
    CHECK(max_abs(l->lora().b.grad() - p.spec.scale() * torch::matmul(dw, l->lora().a.t())) < 1e-10);
  }
  for (const auto& item : p.adapted->named_parameters())
    if (!models::is_lora_parameter(item.key())) {
      INFO(item.key());
      CHECK(!item.value().grad().defined());
    }
}

TEST_CASE(
    "unified LoRA policy: trains the adapters only; its reference is the base, adapters off; its "
    "directories round-trip",
    "[unified_policy][lora]") {
  models::UnifiedModel m = tiny_model(5);
  const models::LoraSpec spec{2, 4.0, models::lora_unified_names()};
  models::attach_lora(*m, spec, 9);
  UnifiedTextPolicy policy(m, spec, nlohmann::json{{"base_model_name_or_path", nullptr}});
  CHECK(policy.has_adapters());
  const auto params = policy.parameters();
  CHECK(params.size() == 2 * 7 * 2);
  int64_t n = 0;
  for (const auto& t : params) {
    n += t.numel();
    CHECK(t.requires_grad());
  }
  for (const auto& t : policy.base_parameters()) CHECK(!t.requires_grad());
  CHECK(n == 2 * 2 * (4 * (16 + 16) + 2 * (16 + 32) + (32 + 16)));  // blocks x rank x (q,k,v,o; gate, up; down)
  const ArSample a = sample({1, 5, 9, 12, 3}, 2), b = sample({7, 2, 30}, 1);
  const PackedBatch batch = collate_packed({&a, &b}, {}, torch::kFloat64);
  UnifiedTextPolicy plain(tiny_model(5));
  // Step 0 (B zero) is the base, bit for bit.
  CHECK(torch::equal(policy.forward_packed(batch, false).logp, plain.forward_packed(batch, false).logp));
  {
    torch::NoGradGuard no_grad;
    for (auto& t : params) t.add_(0.05);  // the adapters move (B non-zero)
  }
  const torch::Tensor live = policy.forward_packed(batch, false).logp;
  const std::unique_ptr<TextPolicy> ref = policy.frozen_copy();
  const torch::Tensor off = ref->forward_packed(batch, false).logp;
  CHECK(torch::equal(off, plain.forward_packed(batch, false).logp));  // the base, no copy made
  CHECK(max_abs(live - off) > 1e-4);                                  // control: the adapters matter
  CHECK_THROWS_AS(ref->generate({}, {}), std::logic_error);

  const auto dir = std::filesystem::temp_directory_path() / "tandem_unified_lora_test";
  std::filesystem::remove_all(dir);
  policy.save((dir / "adapter").string(), true);
  policy.save_base((dir / "base").string(), true);
  CHECK(std::filesystem::exists(dir / "adapter" / "adapter_config.json"));
  const auto base_file = models::load_safetensors((dir / "base" / "model.safetensors").string());
  for (const auto& [name, t] : base_file) CHECK(!models::is_lora_parameter(name));
  CHECK(base_file.size() == tiny_model(5)->named_parameters().size());
  models::UnifiedModel m2 = tiny_model(7);  // another base and fresh adapters, then both loaded
  models::attach_lora(*m2, spec, 10);
  UnifiedTextPolicy back(m2, spec, nlohmann::json::object());
  back.load_base((dir / "base").string());
  back.load((dir / "adapter").string());
  CHECK(torch::equal(back.forward_packed(batch, false).logp, live));
  std::filesystem::remove_all(dir);
}
