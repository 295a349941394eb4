// LoRA under tensor and context parallelism on real ranks (models/llama/lora.h): column-parallel
// layers split B with W's rows and replicate A, row-parallel ones split A with W's columns and
// replicate B; cp ranks hold partial gradients, summed over cp as over dp. The logits, the adapters'
// gradients (each tp rank's slice) and the gathered peft state equal the one-rank model's (float64,
// 1e-10 of each reference's largest magnitude).
#include <catch2/catch.hpp>

#include "llama_test_util.h"
#include "models/llama/lora.h"
#include "models/llama/weights.h"
#include "mpi_test_util.h"
#include "parallel/gradient_reduction.h"

using namespace tandem;

namespace {

models::LlamaConfig tp_config() {  // 8 heads, 4 kv heads, an MLP of 50 (uneven shards over 4)
  models::LlamaConfig c;
  c.vocab_size = 97, c.hidden_size = 64, c.num_layers = 2, c.num_heads = 8, c.num_kv_heads = 4;
  c.intermediate_size = 50, c.max_seq_len = 64, c.qkv_bias = true, c.initializer_range = 0.3;
  return c;
}

const models::LoraSpec kSpec{4, 8, models::lora_linear_names()};

models::LlamaForCausalLM make(const parallel::ParallelContext& ctx, const std::map<std::string, torch::Tensor>* state) {
  models::LlamaForCausalLM m(tp_config(), ctx, 3);
  m->to(torch::kFloat64);
  models::attach_lora(*m, kSpec, 11);
  if (state) models::load_lora_state(*m, *state, "the one-rank model");
  return m;
}

torch::Tensor loss_of(models::LlamaForCausalLM& m, const test::RaggedBatch& b, bool packed) {
  const models::TokenLogProbs r =
      packed ? m->log_probs(b.packed, b.packed_targets, {}) : m->log_probs(b.padded, b.padded_targets, {});
  return (r.logp * test::random_weights(r.logp.numel(), 9, torch::kFloat64).view(r.logp.sizes())).sum();
}

}  // namespace

TEST_CASE("LoRA under tp and cp: logits, adapter gradients and the gathered state equal one rank (float64 1e-10)",
          "[mpi][lora]") {
  const test::RaggedBatch b = test::ragged_batch(test::random_sequences({5, 1, 9, 4, 12}, 97, 21));
  // The one-rank model with a random B (peft's zero B would hide B's sharding).
  models::LlamaForCausalLM single = make({}, nullptr);
  {
    torch::NoGradGuard no_grad;
    at::Generator gen = at::detail::createCPUGenerator(5);
    for (auto& p : single->named_parameters())
      if (p.key().find("lora_B") != std::string::npos)
        p.value().copy_(torch::randn(p.value().sizes(), gen, torch::kFloat64) * 0.3);
  }
  const std::map<std::string, torch::Tensor> state = models::gather_lora_state(*single);
  for (const bool packed : {true, false}) {
    single->zero_grad();
    loss_of(single, b, packed).backward();
    const auto ref = single->named_parameters();
    torch::Tensor ref_logits;
    {
      torch::NoGradGuard no_grad;
      ref_logits = packed ? single->logits(b.packed) : single->logits(b.padded);
    }
    for (const test::Layout l : std::vector<test::Layout>{{2, 1}, {4, 1}, {1, 2}, {2, 2}}) {
      if (test::world_size() % (l.tp * l.cp) != 0 || (!packed && l.cp > 1)) continue;  // cp splits packed micros
      INFO("tp " << l.tp << " cp " << l.cp << " packed " << packed << " world " << test::world_size());
      test::Groups g(l);
      models::LlamaForCausalLM m = make(g.ctx, &state);
      loss_of(m, b, packed).backward();
      int64_t checked = 0;
      for (const auto& p : m->named_parameters()) {
        const bool is_a = p.key().find("lora_A") != std::string::npos,
                   is_b = p.key().find("lora_B") != std::string::npos;
        if (!is_a && !is_b) {
          CHECK_FALSE(p.value().grad().defined());  // the base is frozen
          continue;
        }
        const std::string stem = p.key().substr(0, p.key().size() - 6);  // "...q_proj."
        models::HfParamSpec spec;
        for (const auto& s : models::hf_param_specs(tp_config()))
          if (s.name == stem + "weight") spec = s;
        REQUIRE(!spec.name.empty());
        const torch::Tensor full = ref[p.key()].grad();
        torch::Tensor grad = p.value().grad().contiguous();
        if (g.ctx.cp_enabled()) g.cp->all_reduce(grad);  // each cp rank's gradient is partial, as over dp
        // B is split on dim 0 as a column-parallel W; A on dim 1 as a row-parallel W; else replicated.
        const bool split = (is_b && spec.split_dim == 0) || (is_a && spec.split_dim == 1);
        const torch::Tensor want = split ? models::tp_slice(full, spec, g.ctx.tp_rank, g.ctx.tp_size) : full;
        INFO(p.key());
        REQUIRE(grad.sizes() == want.sizes());
        CHECK(test::rel_to_max(grad, want) < 1e-10);
        ++checked;
      }
      CHECK(checked == 28);
      torch::NoGradGuard no_grad;
      CHECK(test::rel_to_max(packed ? m->logits(b.packed) : m->logits(b.padded), ref_logits) < 1e-10);
      const auto gathered = models::gather_lora_state(*m);
      for (const auto& [key, t] : state) CHECK(torch::equal(gathered.at(key), t));
    }
  }
}

TEST_CASE(
    "under tp the gradient norm is the one-rank model's (sharded parts summed over tp, replicated ones once), "
    "full and LoRA; a non-finite shard stops every tp rank; without the tp flags the norm is the rank's own "
    "(control)",
    "[mpi][lora][gradients]") {
  const test::RaggedBatch b = test::ragged_batch(test::random_sequences({5, 1, 9, 4, 12}, 97, 21));
  for (const bool lora : {false, true}) {
    auto build = [&](const parallel::ParallelContext& ctx) {
      models::LlamaForCausalLM m(tp_config(), ctx, 3);
      m->to(torch::kFloat64);
      if (!lora) return m;
      models::attach_lora(*m, kSpec, 11);
      torch::NoGradGuard no_grad;  // a nonzero B, the same full tensors on every layout
      at::Generator gen = at::detail::createCPUGenerator(5);
      std::map<std::string, torch::Tensor> full;
      for (const auto& [key, t] : models::gather_lora_state(*m))
        full[key] = key.find("lora_B") != std::string::npos ? torch::randn(t.sizes(), gen, torch::kFloat64) * 0.3 : t;
      models::load_lora_state(*m, full, "test");
      return m;
    };
    auto trained = [&](models::LlamaForCausalLM& m) { return lora ? models::lora_parameters(*m) : m->parameters(); };
    models::LlamaForCausalLM single = build({});
    loss_of(single, b, true).backward();
    double ref = 0;
    for (const auto& p : trained(single)) ref += p.grad().pow(2).sum().item<double>();
    ref = std::sqrt(ref);
    for (const int64_t tp : {2, 4}) {
      if (test::world_size() % tp != 0) continue;
      INFO("lora " << lora << " tp " << tp);
      test::Groups g({tp, 1});
      models::LlamaForCausalLM m = build(g.ctx);
      loss_of(m, b, true).backward();
      const std::vector<torch::Tensor> params = trained(m);
      const auto self = test::block_communicator(1);
      const parallel::TpShards shards{g.tp.get(), models::tp_sharded(*m, params)};
      const parallel::GradientCheck got = parallel::check_gradients(params, true, *self, shards);
      CHECK(got.finite);
      CHECK(got.norm == Approx(ref).epsilon(1e-10));
      // Control: this rank's own norm, what clipping used before.
      CHECK(std::abs(parallel::check_gradients(params, true, *self).norm - ref) > 1e-3 * ref);
      // A NaN in one rank's shard: every tp rank skips.
      size_t first = 0;
      while (!shards.sharded[first]) ++first;
      if (g.ctx.tp_rank == 1) params[first].mutable_grad().view({-1})[0] = std::nan("");
      CHECK_FALSE(parallel::check_gradients(params, true, *self, shards).finite);
    }
  }
}
