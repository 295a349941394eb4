// LoRA adapters (models/llama/lora.h, parallel/tp_layers.h's arithmetic) against independent
// references: the plain model with W + scale B A written into its weights by the test (float64
// forward at 1e-12), the adapters' gradients from that model's weight gradient by the chain rule
// (dA = s B^T dW, dB = s dW A^T), a frozen base, step 0 and adapters-off equal to the base bit for
// bit, merge, the peft directory, and the checks on what is read back. peft itself is the oracle in
// tests/e2e/check_lora.sh (the hidden [.peft_oracle] case here).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "core/config/config.h"
#include "core/policies/llama_policy.h"
#include "core/tracks/lora_checkpoint.h"
#include "llama_test_util.h"
#include "models/llama/lora.h"
#include "models/llama/weights.h"
#include "models/safetensors.h"

using namespace tandem;

namespace {

models::LlamaConfig lora_config() {  // q/k/v biases, GQA, an MLP wider than the hidden size
  models::LlamaConfig c;
  c.vocab_size = 61, c.hidden_size = 32, c.num_layers = 2, c.num_heads = 4, c.num_kv_heads = 2;
  c.intermediate_size = 48, c.max_seq_len = 64, c.qkv_bias = true, c.initializer_range = 0.2;
  return c;
}

models::LoraSpec spec_of(std::vector<std::string> targets, int64_t rank = 4, double alpha = 8) {
  return {rank, alpha, std::move(targets)};
}

// A model with adapters whose B is random too (peft's init leaves it zero, which would hide B's role).
models::LlamaForCausalLM adapted_model(torch::Dtype dtype, const models::LoraSpec& spec, bool random_b = true) {
  models::LlamaForCausalLM m(lora_config(), parallel::ParallelContext{}, 3);
  m->to(dtype);
  models::attach_lora(*m, spec, 11);
  if (random_b) {
    torch::NoGradGuard no_grad;
    at::Generator gen = at::detail::createCPUGenerator(5);
    for (auto& p : m->named_parameters())
      if (p.key().find("lora_B") != std::string::npos)
        p.value().copy_(torch::randn(p.value().sizes(), gen, torch::kFloat64) * 0.3);
  }
  return m;
}

// A plain model holding the adapted model's base with W + scale B A in every adapted module.
models::LlamaForCausalLM merged_by_hand(models::LlamaForCausalLM& adapted, double scale) {
  models::LlamaForCausalLM plain(lora_config(), parallel::ParallelContext{}, std::nullopt);
  plain->to(adapted->parameters().front().scalar_type());
  torch::NoGradGuard no_grad;
  const auto src = adapted->named_parameters();
  for (auto& p : plain->named_parameters()) {
    p.value().copy_(src[p.key()]);
    const std::string stem = p.key().substr(0, p.key().size() - std::string("weight").size());
    if (src.contains(stem + "lora_A"))
      p.value().add_(torch::matmul(src[stem + "lora_B"].to(torch::kFloat64), src[stem + "lora_A"].to(torch::kFloat64))
                         .to(p.value().scalar_type()) *
                     scale);
  }
  return plain;
}

torch::Tensor loss_of(models::LlamaForCausalLM& m, const test::RaggedBatch& b, bool packed) {
  const models::TokenLogProbs r =
      packed ? m->log_probs(b.packed, b.packed_targets, {}) : m->log_probs(b.padded, b.padded_targets, {});
  const torch::Tensor w = test::random_weights(r.logp.numel(), 9, r.logp.scalar_type()).view(r.logp.sizes());
  return (r.logp * w).sum();
}

const test::RaggedBatch& batch() {
  static const test::RaggedBatch b = test::ragged_batch(test::random_sequences({5, 1, 9, 4}, 61, 21));
  return b;
}

}  // namespace

TEST_CASE(
    "attach_lora freezes the base and adds float32 A, B in peft's init: step 0 computes the base (float32 "
    "1e-6, float64 1e-14)",
    "[lora]") {
  // The adapters add exact zeros (B = 0), but the sum leaves q/k/v contiguous where the plain fused
  // GEMM leaves strided views, and the kernels after it round differently: equal within rounding.
  for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {
    models::LlamaForCausalLM m(lora_config(), parallel::ParallelContext{}, 3);
    m->to(dtype);
    torch::NoGradGuard no_grad;
    const torch::Tensor before = m->logits(batch().packed), before_pad = m->logits(batch().padded);
    models::attach_lora(*m, spec_of(models::lora_linear_names()), 11);
    const double tol = dtype == torch::kFloat32 ? 1e-6 : 1e-14;
    CHECK(test::rel_to_max(m->logits(batch().packed), before) < tol);
    CHECK(test::rel_to_max(m->logits(batch().padded), before_pad) < tol);
  }
  models::LlamaForCausalLM base(lora_config(), parallel::ParallelContext{}, 3);
  models::attach_lora(*base, spec_of(models::lora_linear_names()), 11);
  const auto lora = models::lora_parameters(*base);
  CHECK(lora.size() == 2 * 7 * 2);
  for (const auto& p : models::base_parameters(*base)) CHECK_FALSE(p.requires_grad());
  for (size_t i = 0; i < lora.size(); i += 2) {
    const torch::Tensor& a = lora[i];
    CHECK(a.requires_grad());
    CHECK(a.scalar_type() == torch::kFloat32);
    const double bound = 1.0 / std::sqrt(static_cast<double>(a.size(1)));  // kaiming_uniform(a = sqrt(5))
    CHECK(a.abs().max().item<double>() <= bound);
    CHECK(a.abs().max().item<double>() > 0.8 * bound);
    CHECK(lora[i + 1].abs().max().item<double>() == 0);
  }
  // bf16 base: bf16 adapters, which a bf16 run trains through float32 master weights.
  models::LlamaForCausalLM bf(lora_config(), parallel::ParallelContext{}, 3);
  bf->to(torch::kBFloat16);
  models::attach_lora(*bf, spec_of({"q_proj"}), 11);
  CHECK(models::lora_parameters(*bf).front().scalar_type() == torch::kBFloat16);
}

TEST_CASE(
    "LoRA forward equals the base with W + scale BA written in (float64 1e-12), packed and padded, every "
    "target set",
    "[lora]") {
  for (const auto& targets : std::vector<std::vector<std::string>>{
           models::lora_linear_names(), {"q_proj", "v_proj"}, {"o_proj", "down_proj"}, {"k_proj", "up_proj"}}) {
    INFO(targets.front() << " and " << targets.size() - 1 << " more");
    const models::LoraSpec spec = spec_of(targets);
    models::LlamaForCausalLM m = adapted_model(torch::kFloat64, spec);
    models::LlamaForCausalLM ref = merged_by_hand(m, spec.scale());
    // Three paths: autograd on (training's), off (the old log-prob pass's scoring forward, which
    // must be training's to the bit: DESIGN.md's first ratio of exactly 1) and off inside the
    // sampler (each projection its own GEMM, B's product added into the column and row layers'
    // outputs in place).
    const torch::Tensor with_grad = m->logits(batch().packed).detach();
    torch::NoGradGuard no_grad;
    const torch::Tensor got = m->logits(batch().packed), want = ref->logits(batch().packed);
    torch::Tensor sampled;
    {
      parallel::SamplingGuard sampling;
      sampled = m->logits(batch().packed);
    }
    CHECK(test::rel_to_max(got, want) < 1e-12);
    CHECK(test::rel_to_max(with_grad, want) < 1e-12);
    CHECK(test::rel_to_max(sampled, want) < 1e-12);
    CHECK(torch::equal(got, with_grad));
    CHECK(test::rel_to_max(m->logits(batch().padded), ref->logits(batch().padded)) < 1e-12);
    // Control: without the adapters the model is further from the reference than the tolerance.
    parallel::LoraOffGuard off;
    CHECK(test::rel_to_max(m->logits(batch().packed), want) > 1e-3);
  }
}

TEST_CASE(
    "LoRA gradients: the adapters' equal the chain rule through the merged model's (float64 1e-10); the base "
    "gets none; with layer recompute the same",
    "[lora]") {
  const models::LoraSpec spec = spec_of(models::lora_linear_names());
  for (const bool recompute : {false, true}) {
    for (const bool packed : {true, false}) {
      INFO("recompute " << recompute << " packed " << packed);
      models::LlamaForCausalLM m = adapted_model(torch::kFloat64, spec);
      m->set_execution(models::AttentionKernel::kAuto, recompute);
      models::LlamaForCausalLM ref = merged_by_hand(m, spec.scale());
      loss_of(m, batch(), packed).backward();
      loss_of(ref, batch(), packed).backward();
      for (const auto& p : models::base_parameters(*m)) CHECK_FALSE(p.grad().defined());
      const auto got = m->named_parameters();
      const auto want = ref->named_parameters();
      int64_t checked = 0;
      for (const auto& p : got) {
        const std::string& key = p.key();
        const size_t at = key.find("lora_A");
        if (at == std::string::npos) continue;
        const std::string stem = key.substr(0, at);
        const torch::Tensor dw = want[stem + "weight"].grad();  // (out, in)
        const torch::Tensor a = got[stem + "lora_A"].detach(), b = got[stem + "lora_B"].detach();
        INFO(stem);
        CHECK(test::rel_to_max(got[stem + "lora_A"].grad(), spec.scale() * torch::matmul(b.t(), dw)) < 1e-10);
        CHECK(test::rel_to_max(got[stem + "lora_B"].grad(), spec.scale() * torch::matmul(dw, a.t())) < 1e-10);
        ++checked;
      }
      CHECK(checked == 14);
    }
  }
}

TEST_CASE(
    "adapters off (LoraOffGuard, the KL reference) is the base bit for bit; a LoRA policy's frozen_copy equals "
    "an explicit reference copy of the base",
    "[lora]") {
  const models::LoraSpec spec = spec_of(models::lora_linear_names());
  models::LlamaForCausalLM base(lora_config(), parallel::ParallelContext{}, 3);  // the explicit copy
  models::LlamaForCausalLM m = adapted_model(torch::kFloat32, spec);
  LlamaPolicy plain(base), policy(m, {}, spec, {});
  std::unique_ptr<TextPolicy> ref = policy.frozen_copy();
  PackedBatch pb;
  pb.input_ids = batch().packed.input_ids, pb.position_ids = batch().packed.position_ids;
  pb.cu_seqlens = batch().packed.cu_seqlens, pb.max_seqlen = batch().packed.max_seqlen;
  pb.targets = batch().packed_targets;
  torch::NoGradGuard no_grad;
  const torch::Tensor want = plain.forward_packed(pb, false).logp;
  CHECK(torch::equal(ref->forward_packed(pb, false).logp, want));
  CHECK(ref->parameters().size() == base->parameters().size());  // the base's tensors, no adapters
  // Control: the policy itself (adapters on) differs from the reference.
  CHECK((policy.forward_packed(pb, false).logp - want).abs().max().item<double>() > 1e-4);
  CHECK(policy.parameters().size() == 28);  // only the adapters train
  // The guard is per thread and scoped: after it the adapters apply again.
  {
    parallel::LoraOffGuard off;
    CHECK(torch::equal(policy.forward_packed(pb, false).logp, want));
  }
  CHECK_FALSE(torch::equal(policy.forward_packed(pb, false).logp, want));
}

TEST_CASE("merge_lora gives the unmerged logits (float64 1e-12, float32 2e-6)", "[lora]") {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    models::LlamaForCausalLM m = adapted_model(dtype, spec_of(models::lora_linear_names()));
    torch::NoGradGuard no_grad;
    const torch::Tensor before = m->logits(batch().packed);
    models::merge_lora(*m);
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 2e-6;
    CHECK(test::rel_to_max(m->logits(batch().packed), before) < tol);
    // The merged weights alone (adapters off) compute the same: they are what export writes.
    parallel::LoraOffGuard off;
    CHECK(test::rel_to_max(m->logits(batch().packed), before) < tol);
  }
}

TEST_CASE(
    "the peft adapter directory: config and float32 factors round-trip; what tandem cannot apply is refused by "
    "name",
    "[lora]") {
  const std::string dir = (std::filesystem::temp_directory_path() / "tandem_lora_dir").string();
  std::filesystem::remove_all(dir);
  const models::LoraSpec spec = spec_of({"q_proj", "v_proj", "down_proj"}, 4, 6.5);
  models::LlamaForCausalLM m = adapted_model(torch::kFloat32, spec);
  models::save_peft_adapter(*m, spec, dir, true, {{"base_model_name_or_path", "/models/base"}});
  const auto tensors = models::load_safetensors(dir + "/adapter_model.safetensors");
  CHECK(tensors.size() == 2 * 3 * 2);
  CHECK(tensors.at("base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight").sizes() ==
        at::IntArrayRef({4, 32}));
  CHECK(tensors.at("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight").sizes() == at::IntArrayRef({32, 4}));
  const models::LoraSpec back = models::read_peft_config(dir);
  CHECK(back.rank == 4);
  CHECK(back.alpha == 6.5);
  CHECK(back.targets == spec.targets);
  models::LlamaForCausalLM other = adapted_model(torch::kFloat32, spec, /*random_b=*/false);
  models::load_lora_state(*other, models::read_peft_weights(dir), dir);
  torch::NoGradGuard no_grad;
  CHECK(torch::equal(other->logits(batch().packed), m->logits(batch().packed)));
  // Another rank: every factor named with both shapes.
  models::LlamaForCausalLM wrong = adapted_model(torch::kFloat32, spec_of({"q_proj", "v_proj", "down_proj"}, 8, 16));
  CHECK_THROWS_WITH(models::load_lora_state(*wrong, models::read_peft_weights(dir), dir),
                    Catch::Contains("q_proj.lora_A.weight: expected shape [8, 32], got [4, 32]"));
  // What the forward would not reproduce.
  auto rewrite = [&](const std::string& key, const nlohmann::json& value) {
    std::ifstream in(dir + "/adapter_config.json");
    nlohmann::json c = nlohmann::json::parse(in);
    c[key] = value;
    std::ofstream(dir + "/adapter_config.json") << c.dump();
  };
  rewrite("use_dora", true);
  CHECK_THROWS_AS(models::read_peft_config(dir), UserError);
  rewrite("use_dora", false);
  rewrite("target_modules", nlohmann::json::array({"lm_head"}));
  CHECK_THROWS_WITH(models::read_peft_config(dir), Catch::Contains("lm_head"));
  rewrite("target_modules", "all-linear");
  CHECK(models::read_peft_config(dir).targets == models::lora_linear_names());
  std::filesystem::remove_all(dir);
}

TEST_CASE("the recipe's tracks.ar.lora: all-linear resolves to the seven modules; bad values exit 2 naming the key",
          "[lora][config]") {
  LoraConfig l;
  l.rank = 8;
  CHECK(lora_spec(l).targets == models::lora_linear_names());
  l.targets = {"q_proj", "o_proj"};
  CHECK(lora_spec(l).targets == std::vector<std::string>{"q_proj", "o_proj"});
  const auto load = [](const std::string& lora) {
    return load_config_from_string("tracks:\n  ar:\n    lora:\n" + lora, "test", {});
  };
  CHECK(load("      rank: 8\n").tracks.ar.lora.enabled());
  CHECK_THROWS_WITH(load("      rank: 8\n      dropout: 0.1\n"), Catch::Contains("tracks.ar.lora.dropout"));
  CHECK_THROWS_WITH(load("      rank: 8\n      targets: [q_proj, lm_head]\n"), Catch::Contains("lm_head"));
  CHECK_THROWS_WITH(load("      rank: 8\n      targets: [all-linear, q_proj]\n"),
                    Catch::Contains("tracks.ar.lora.targets"));
  CHECK_THROWS_WITH(load("      rank: -1\n"), Catch::Contains("tracks.ar.lora.rank"));
  CHECK_NOTHROW(load("      rank: 0\n      dropout: 0.5\n"));  // off: nothing to check
  // A warm-start trains a LoRA run's base: not in bf16, where the base has no float32 master.
  CHECK_THROWS_WITH(load_config_from_string("run: {dtype: bfloat16}\ntracks:\n  ar:\n    warmstart: {steps: 5}\n"
                                            "    lora: {rank: 8}\n",
                                            "test", {}),
                    Catch::Contains("tracks.ar.warmstart.steps"));
  CHECK_NOTHROW(
      load_config_from_string("tracks:\n  ar:\n    warmstart: {steps: 5}\n    lora: {rank: 8}\n", "test", {}));
}

// peft as the oracle: tests/e2e/check_lora.sh trains adapters on a transformers directory, and
// scripts/fixtures/peft_oracle.py writes the logits peft computes with the exported adapter on that
// base (float64); TANDEM_PEFT_ORACLE names its manifest. tandem's checkpoint, read back unmerged
// (generate's path), gives them at 1e-10 of max |logit|.
TEST_CASE("a LoRA checkpoint's logits equal peft's on the exported adapter (float64 1e-10)", "[.peft_oracle]") {
  const char* manifest_path = std::getenv("TANDEM_PEFT_ORACLE");
  REQUIRE(manifest_path != nullptr);
  std::ifstream in(manifest_path);
  const nlohmann::json manifest = nlohmann::json::parse(in);
  const std::string checkpoint = manifest.at("checkpoint");
  const Config config = load_saved_config(checkpoint + "/recipe.yaml");
  BuiltTextPolicy built = load_lora_checkpoint(checkpoint, config, torch::kFloat64);
  auto* policy = dynamic_cast<LlamaPolicy*>(built.policy.get());
  REQUIRE(policy != nullptr);
  const auto ref = models::load_safetensors(manifest.at("ref").get<std::string>());
  torch::NoGradGuard no_grad;
  int64_t n = 0;
  for (; ref.count("ids_" + std::to_string(n)); ++n) {
    const torch::Tensor ids = ref.at("ids_" + std::to_string(n));    // (T)
    const torch::Tensor want = ref.at("peft_" + std::to_string(n));  // (T, V)
    const test::RaggedBatch b =
        test::ragged_batch({std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel())});
    const torch::Tensor got = policy->model()->logits(b.packed);
    INFO("sequence " << n);
    CHECK(test::rel_to_max(got, want) < 1e-10);
  }
  CHECK(n > 0);
}
