// The Llama model under tensor and context parallelism on real ranks: log-probs, entropies,
// logits, parameter gradients and (with the loss fused into the head) the loss equal the one-rank model (float64, 1e-10
// of each reference tensor's largest magnitude); tp ranks' gradients are compared with their slice of the one-rank
// gradient, cp ranks' gradients after summing over cp. Layouts that do not divide the world
// size are skipped; the rest run side by side as dp replicas.
#include <stdlib.h>
#include <catch2/catch.hpp>

#include <filesystem>

#include "llama_test_util.h"
#include "models/llama/weights.h"
#include "mpi_test_util.h"
#include "parallel/process_groups.h"
#include "parallel/vocab_parallel_logprob.h"

using namespace tandem;

namespace {

using test::Groups;
using test::Layout;

bool fits(Layout l) { return test::world_size() % (l.tp * l.cp) == 0; }

struct Outcome {
  torch::Tensor logp, entropy, logits;
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;  // by HF name: this rank's shard
};

// The loss sum(logp * wl + entropy * we) on the batch's flat token axis, by autograd through the
// log-probs or (fused) inside the lm head, which asks for each chunk's gradient by token index.
// perturb is added to the first token's weight (the controls). With `wanted` (T) the weights are 0
// outside it, and with `restrict` the head computes only its rows (LogProbOptions::wanted).
Outcome run(models::LlamaForCausalLM& model, const test::RaggedBatch& b, bool packed, bool fused = false,
            double perturb = 0, const torch::Tensor& wanted = {}, bool restrict = false) {
  model->zero_grad();
  Outcome o;
  models::LogProbOptions opts{true, true, 5};
  const int64_t n = (packed ? b.packed_targets : b.padded_targets).numel();
  torch::Tensor wl = test::random_weights(n, 1, torch::kFloat64).clone();  // (T)
  wl[0] += perturb;
  torch::Tensor we = test::random_weights(n, 2, torch::kFloat64);  // (T)
  if (wanted.defined()) {
    wl = wl * wanted, we = we * wanted;
    if (restrict) opts.wanted = packed ? wanted : wanted.view(b.padded_targets.sizes());
  }
  if (fused) {
    opts.token_loss = [&](const torch::Tensor& index, const torch::Tensor& logp, const torch::Tensor& entropy) {
      const torch::Tensor gl = wl.index_select(0, index), ge = we.index_select(0, index);  // (C)
      return parallel::TokenLossChunk{(logp * gl).sum() + (entropy * ge).sum(), gl, ge};
    };
  }
  const models::TokenLogProbs r =
      packed ? model->log_probs(b.packed, b.packed_targets, opts) : model->log_probs(b.padded, b.padded_targets, opts);
  const torch::Tensor loss =
      fused ? r.loss : (r.logp * wl.view(r.logp.sizes())).sum() + (r.entropy * we.view(r.logp.sizes())).sum();
  loss.backward();
  o.loss = loss.item<double>();
  o.logp = r.logp.detach();
  o.entropy = r.entropy.detach();
  // A cp rank without tokens reaches no weight: undefined there, zeros to the gradient reduction.
  for (const auto& p : model->named_parameters())
    o.grads[p.key()] = p.value().grad().defined() ? p.value().grad().clone() : torch::zeros_like(p.value());
  torch::NoGradGuard no_grad;
  o.logits = packed ? model->logits(b.packed) : model->logits(b.padded);
  return o;
}

// Compares a parallel run with the one-rank run; sums cp-partial gradients over cp first.
void check_equal(const Outcome& got, const Outcome& ref, const models::LlamaConfig& cfg, const Groups& g,
                 bool fused_loss = false) {
  CHECK(test::rel_to_max(got.logp, ref.logp) < 1e-10);
  CHECK(test::rel_to_max(got.entropy, ref.entropy) < 1e-10);
  CHECK(test::rel_to_max(got.logits, ref.logits) < 1e-10);
  torch::Tensor loss = torch::tensor(got.loss, torch::kFloat64);  // a fused head's loss: this cp rank's tokens
  if (g.ctx.cp_enabled() && fused_loss) g.cp->all_reduce(loss);
  CHECK(loss.item<double>() == Approx(ref.loss).epsilon(1e-10));
  for (const models::HfParamSpec& spec : models::hf_param_specs(cfg)) {
    INFO(spec.name);
    torch::Tensor grad = got.grads.at(spec.name).contiguous();
    if (g.ctx.cp_enabled()) g.cp->all_reduce(grad);
    const torch::Tensor expected = models::tp_slice(ref.grads.at(spec.name), spec, g.ctx.tp_rank, g.ctx.tp_size);
    REQUIRE(grad.sizes() == expected.sizes());
    CHECK(test::rel_to_max(grad, expected) < 1e-10);
  }
}

// A config that splits over 4 tp ranks (8 heads, 4 kv heads) with an uneven vocab and MLP.
models::LlamaConfig wide_config(const std::string& family = "qwen2") {
  models::LlamaConfig c;
  c.vocab_size = 97, c.hidden_size = 64, c.num_layers = 2, c.num_heads = 8, c.num_kv_heads = 4;
  c.intermediate_size = 50, c.max_seq_len = 64, c.qkv_bias = family == "qwen2", c.initializer_range = 0.3;
  if (family == "qwen3") c.qk_norm = true, c.explicit_head_dim = 12;  // Qwen3: q/k norms, head_dim != hidden / heads
  if (family == "mistral") c.sliding_window = 4;  // shorter than the 5-, 9- and 12-token sequences, and cp shards
  if (family == "gemma3") {  // a local layer (window 4, its own RoPE base) then a global one; Gemma's block
    c.block = models::DecoderBlock::kGemma3, c.qk_norm = true, c.sliding_window = 4, c.full_attention_layers = {1};
    c.rope_local_theta = 500, c.query_pre_attn_scalar = 20, c.tie_embeddings = true;
  }
  return c;
}

const std::vector<Layout> kLayouts{{2, 1}, {1, 2}, {2, 2}, {1, 4}, {4, 1}};

}  // namespace

TEST_CASE("tp and cp log-probs, logits and gradients equal one rank (float64 1e-10)", "[mpi][llama]") {
  const test::RaggedBatch b = test::ragged_batch(test::random_sequences({5, 1, 9, 4, 12}, 97, 21));
  for (const std::string name : {"tiny_llama", "tiny_qwen2", "wide", "wide_qwen3", "wide_mistral", "wide_gemma3"}) {
    const bool wide = name.rfind("wide", 0) == 0;
    auto make = [&](const parallel::ParallelContext& ctx) {
      if (!wide) return models::load_llama(test::llama_fixture(name), ctx, torch::kFloat64);
      models::LlamaForCausalLM m(wide_config(name == "wide" ? "qwen2" : name.substr(5)), ctx, 3);
      m->to(torch::kFloat64);
      return m;
    };
    models::LlamaForCausalLM single = make({});
    const Outcome ref_packed = run(single, b, true), ref_padded = run(single, b, false);
    for (const Layout l : kLayouts) {
      if (!fits(l) || (!wide && l.tp == 4)) continue;  // the fixtures have 2 kv heads
      INFO(name << " tp=" << l.tp << " cp=" << l.cp << " world=" << test::world_size());
      Groups g(l);
      models::LlamaForCausalLM model = make(g.ctx);
      check_equal(run(model, b, true), ref_packed, single->config(), g);
      if (l.cp == 1) check_equal(run(model, b, false), ref_padded, single->config(), g);
      check_equal(run(model, b, true, true), ref_packed, single->config(), g, true);
      if (l.cp == 1) check_equal(run(model, b, false, true), ref_padded, single->config(), g, true);
    }
  }
  // One rank always runs the communicator path with groups of one.
  Groups solo({1, 1});
  models::LlamaForCausalLM model = models::load_llama(test::llama_fixture("tiny_qwen2"), solo.ctx, torch::kFloat64);
  models::LlamaForCausalLM single = models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kFloat64);
  check_equal(run(model, b, true), run(single, b, true), single->config(), solo);
}

TEST_CASE("tp and cp on the fused attention kernels, with layer recompute, equal one rank (float64 1e-10)",
          "[mpi][llama][fused]") {
  // The flash kernels run float64, so the same tolerance holds: cp shards past their sequence's
  // start take the prefixed form (prefix keys from the other ranks, own keys causal), and every
  // layer is replayed in the backward, its cp gather and tp reductions included.
  // Mistral's window: padded runs the fused kernel with the band in its mask; packed, whose
  // sequences outgrow the window, falls back to the materialised plan. Gemma 3: its global layer
  // runs the fused kernels, its local layer the materialised plan, each layer replayed with its view.
  const test::RaggedBatch b = test::ragged_batch(test::random_sequences({5, 1, 9, 4, 12}, 97, 21));
  for (const auto& [family, recompute] :
       {std::pair{"qwen2", false}, std::pair{"qwen2", true}, std::pair{"mistral", false}, std::pair{"mistral", true},
        std::pair{"gemma3", false}, std::pair{"gemma3", true}}) {
    auto make = [&](const parallel::ParallelContext& ctx) {
      models::LlamaForCausalLM m(wide_config(family), ctx, 3);
      m->to(torch::kFloat64);
      m->set_execution(models::AttentionKernel::kFused, recompute);
      return m;
    };
    models::LlamaForCausalLM single = make({});
    single->set_execution(models::AttentionKernel::kMaterialised, false);  // the reference
    // Padding rows' logits are no one's: the materialised kernel lets a padding row see itself,
    // the fused one the real keys before it. Compared at real tokens only.
    const auto real_logits = [&](Outcome o) {
      o.logits = o.logits * b.padded.attention_mask.unsqueeze(-1).to(o.logits.dtype());
      return o;
    };
    const Outcome ref_packed = run(single, b, true), ref_padded = real_logits(run(single, b, false));
    for (const Layout l : kLayouts) {
      if (!fits(l)) continue;
      INFO(family << " recompute " << recompute << " tp=" << l.tp << " cp=" << l.cp << " world=" << test::world_size());
      Groups g(l);
      models::LlamaForCausalLM model = make(g.ctx);
      check_equal(run(model, b, true), ref_packed, single->config(), g);
      if (l.cp == 1) check_equal(real_logits(run(model, b, false)), ref_padded, single->config(), g);
    }
  }
}

TEST_CASE("the head on the wanted rows only: log-probs there, 0 elsewhere, the same gradients (float64 1e-10)",
          "[mpi][llama]") {
  const test::RaggedBatch b = test::ragged_batch(test::random_sequences({5, 1, 9, 4, 12}, 97, 21));
  const int64_t n = b.packed_targets.numel();
  const torch::Tensor valid = b.padded.attention_mask.reshape({-1});  // (B*T)
  const auto padded_of = [&](const torch::Tensor& w) {                // (N) -> (B*T), 0 on padding
    return torch::zeros({valid.numel()}, w.options()).masked_scatter(valid, w);
  };
  models::LlamaForCausalLM single = models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kFloat64);
  // Every third token unwanted; and none wanted at all (one row still runs the head, so every
  // rank's backward has the same collectives: no hang under cp).
  const torch::Tensor some = (torch::arange(n) % 3 != 0).to(torch::kFloat64), none = torch::zeros({n}, torch::kFloat64);
  for (const auto& [name, w] : {std::pair{"some", some}, std::pair{"none", none}}) {
    for (const bool fused : {false, true}) {
      // The reference: every row through the head, the unwanted ones weighted 0 and zeroed here.
      const auto reference = [&](bool packed) {
        const torch::Tensor wt = packed ? w : padded_of(w);
        Outcome r = run(single, b, packed, fused, 0, wt, false);
        r.logp = r.logp * wt.view(r.logp.sizes()), r.entropy = r.entropy * wt.view(r.logp.sizes());
        return r;
      };
      const Outcome ref_packed = reference(true), ref_padded = reference(false);
      const auto zero_row0 = [&](Outcome o) {  // "none" keeps row 0's real value
        if (w.sum().item<double>() == 0) o.logp.view(-1)[0] = 0, o.entropy.view(-1)[0] = 0;
        return o;
      };
      const Groups solo({1, 1});
      INFO(name << (fused ? " fused" : ""));
      check_equal(zero_row0(run(single, b, true, fused, 0, w, true)), ref_packed, single->config(), solo, fused);
      check_equal(zero_row0(run(single, b, false, fused, 0, padded_of(w), true)), ref_padded, single->config(), solo,
                  fused);
      for (const Layout l : kLayouts) {
        if (!fits(l) || l.tp == 4) continue;  // the fixture has 2 kv heads
        INFO("tp=" << l.tp << " cp=" << l.cp);
        Groups g(l);
        models::LlamaForCausalLM model = models::load_llama(test::llama_fixture("tiny_qwen2"), g.ctx, torch::kFloat64);
        Outcome got = run(model, b, true, fused, 0, w, true);
        // Under cp, "none" runs row 0 of each rank's shard: zero every row the reference zeroed.
        got.logp = got.logp * w, got.entropy = got.entropy * w;
        check_equal(got, ref_packed, single->config(), g, fused);
        if (l.cp == 1)
          check_equal(zero_row0(run(model, b, false, fused, 0, padded_of(w), true)), ref_padded, single->config(), g,
                      fused);
      }
    }
  }
  // Control: the restricted head does leave the unwanted rows at 0 (the full head does not).
  const Outcome full = run(single, b, true, false, 0, some, false), part = run(single, b, true, false, 0, some, true);
  CHECK((part.logp.masked_select(some == 0) == 0).all().item<bool>());
  CHECK((full.logp.masked_select(some == 0) != 0).all().item<bool>());
}

TEST_CASE("the loss fused into the lm head: one rank, tp and cp equal autograd through the log-probs (float64 1e-10)",
          "[mpi][llama]") {
  const test::RaggedBatch b = test::ragged_batch(test::random_sequences({5, 1, 9, 4, 12}, 97, 21));
  models::LlamaForCausalLM single = models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kFloat64);
  const Outcome ref_packed = run(single, b, true), ref_padded = run(single, b, false);
  const Groups solo({1, 1});
  check_equal(run(single, b, true, true), ref_packed, single->config(), solo, true);
  check_equal(run(single, b, false, true), ref_padded, single->config(), solo, true);
  // Control: a change of 1e-3 in one token's loss weight moves the (tied) head's gradient well
  // past the tolerance, so the comparison above would see a wrong chunk gradient.
  const Outcome moved = run(single, b, true, true, 1e-3);
  const std::string head = "model.embed_tokens.weight";
  CHECK(test::rel_to_max(moved.grads.at(head), ref_packed.grads.at(head)) > 1e-6);
}

TEST_CASE("saving a tp-sharded model gathers the shards into the HF layout", "[mpi][llama]") {
  const Layout l{2, 1};
  if (!fits(l)) return;
  Groups g(l);
  const std::string src = test::llama_fixture("tiny_qwen2");
  models::LlamaForCausalLM model = models::load_llama(src, g.ctx, torch::kFloat32);
  CHECK(model->model->embed_tokens->weight.size(0) == (g.ctx.tp_rank == 0 ? 49 : 48));  // 97 over 2 ranks
  // World rank 0 picks the directory and writes; every rank reads it back.
  std::vector<char> path(4096, 0);
  if (test::world_rank() == 0) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tandem_mpi_llama_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    std::copy(tmpl.begin(), tmpl.end(), path.begin());
  }
  MPI_Bcast(path.data(), static_cast<int>(path.size()), MPI_CHAR, 0, MPI_COMM_WORLD);
  const std::string dir(path.data());
  models::save_llama(*model, dir, test::world_rank() == 0, 20'000);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto saved = models::load_hf_weights(dir), original = models::load_hf_weights(src);
  REQUIRE(saved.size() == original.size());
  for (const auto& [name, t] : original) {
    INFO(name);
    CHECK(torch::equal(saved.at(name), t));
  }
  models::LlamaForCausalLM again = models::load_llama(dir, g.ctx, torch::kFloat32);
  const test::RaggedBatch b = test::ragged_batch(test::random_sequences({6, 3}, 97, 2));
  torch::NoGradGuard no_grad;
  CHECK(torch::equal(again->logits(b.packed), model->logits(b.packed)));
  MPI_Barrier(MPI_COMM_WORLD);
  if (test::world_rank() == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("shared prompts under tp: log-probs, logits and gradients equal one rank (float64 1e-10)",
          "[mpi][llama][share]") {
  // [prompt' 5] [response 4] [response 6] (both continue the prompt) [lone 7]
  const std::vector<int64_t> lengths{5, 4, 6, 7};
  const auto seqs = test::random_sequences(lengths, 97, 33);
  test::RaggedBatch b;
  std::vector<int64_t> ids, pos, cu{0};
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t start = (i == 1 || i == 2) ? 5 : 0;  // responses go on after the prompt's positions
    for (size_t j = 0; j < seqs[i].size(); ++j)
      ids.push_back(seqs[i][j]), pos.push_back(start + static_cast<int64_t>(j));
    cu.push_back(cu.back() + static_cast<int64_t>(seqs[i].size()));
  }
  b.packed = {torch::tensor(ids).view({1, -1}), torch::tensor(pos).view({1, -1}), torch::tensor(cu).to(torch::kInt32),
              11, torch::tensor({-1, 0, 0, -1}, torch::kInt64)};
  b.packed_targets = torch::tensor(ids).roll(-1);
  for (const Layout l : std::vector<Layout>{{2, 1}, {4, 1}}) {
    if (!fits(l)) continue;
    INFO("tp=" << l.tp << " world=" << test::world_size());
    models::LlamaForCausalLM single(wide_config(), parallel::ParallelContext{}, 3);
    single->to(torch::kFloat64);
    const Outcome ref = run(single, b, true), ref_fused = run(single, b, true, true);
    Groups g(l);
    models::LlamaForCausalLM model(wide_config(), g.ctx, 3);
    model->to(torch::kFloat64);
    check_equal(run(model, b, true), ref, single->config(), g);
    check_equal(run(model, b, true, true), ref_fused, single->config(), g, true);
  }
  // cp does not split shared prompts: refused, not silently wrong.
  if (fits({1, 2})) {
    Groups g({1, 2});
    models::LlamaForCausalLM model(wide_config(), g.ctx, 3);
    model->to(torch::kFloat64);
    CHECK_THROWS_AS(model->log_probs(b.packed, b.packed_targets, {}), std::invalid_argument);
  }
}

// A vocabulary tp does not divide: shards of 1001 and 1000 rows. A default chunk size from a
// shard's own rows differs between them (float64, 64 MiB chunks: 8380 and 8388 tokens), so a
// token count between the two was two chunks on one rank and one on the other, and their
// collectives differed in length (an MPI error or a hang). n sits between them whatever the
// default chunk bytes are.
TEST_CASE("an uneven vocabulary split cuts the same logits chunks on every tp rank", "[mpi][llama]") {
  if (test::world_size() % 2 != 0) return;
  const auto tp = test::block_communicator(2);
  const int64_t wide_chunk = parallel::logits_chunk_tokens({}, 1001, 8);
  const int64_t narrow_chunk = parallel::logits_chunk_tokens({}, 1000, 8);
  REQUIRE(wide_chunk + 1 < narrow_chunk);
  const int64_t vocab = 2001, n = wide_chunk + 1, dim = 4;
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::manual_seed(17);
  const torch::Tensor hidden = torch::randn({n, dim}, f64), weight = torch::randn({vocab, dim}, f64);  // (N, D), (V, D)
  const torch::Tensor targets = torch::randint(vocab, {n}, torch::TensorOptions().dtype(torch::kInt64));  // (N)
  const parallel::ShardRange rows = parallel::shard_range(vocab, tp->rank(), 2);
  const int64_t local_rows = rows.end - rows.begin;
  CHECK(parallel::logits_chunk_tokens({}, local_rows, 8) != parallel::logits_chunk_tokens({}, vocab - local_rows, 8));
  const auto split = parallel::vocab_parallel_log_probs(hidden, weight.narrow(0, rows.begin, local_rows), targets,
                                                        rows.begin, tp.get(), {true});
  const auto whole = parallel::vocab_parallel_log_probs(hidden, weight, targets, 0, nullptr, {true});
  CHECK(test::rel_to_max(split.logp, whole.logp) < 1e-12);
  CHECK(test::rel_to_max(split.entropy, whole.entropy) < 1e-12);
}

TEST_CASE("a cp rank whose shard is empty (micros of 1-2 tokens) takes part and gives the one-rank results",
          "[mpi][llama]") {
  // cp 2 cuts a 1-token sequence into 4 chunks, cp 4 cuts 1- and 2-token ones into 8: most chunks
  // are empty, and a micro of such sequences leaves some cp ranks no row at all.
  models::LlamaForCausalLM single = models::load_llama(test::llama_fixture("tiny_qwen2"), {}, torch::kFloat64);
  for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{1}, std::vector<int64_t>{2, 1}}) {
    const test::RaggedBatch b = test::ragged_batch(test::random_sequences(lengths, 97, 5));
    const int64_t n = b.packed_targets.numel();
    const torch::Tensor all = torch::ones({n}, torch::kFloat64);
    for (const bool fused : {false, true}) {
      for (const bool restrict : {false, true}) {
        const Outcome ref = run(single, b, true, fused, 0, all, false);
        for (const Layout l : kLayouts) {
          if (!fits(l) || l.tp == 4 || l.cp == 1) continue;
          INFO("lengths " << lengths.size() << " tp=" << l.tp << " cp=" << l.cp << (fused ? " fused" : "")
                          << (restrict ? " wanted" : ""));
          Groups g(l);
          models::LlamaForCausalLM model =
              models::load_llama(test::llama_fixture("tiny_qwen2"), g.ctx, torch::kFloat64);
          check_equal(run(model, b, true, fused, 0, all, restrict), ref, single->config(), g, fused);
        }
      }
    }
  }
}

TEST_CASE("ids outside the vocabulary are refused by name, not embedded as zeros or scored as -lse under tp",
          "[mpi][llama]") {
  const test::RaggedBatch b = test::ragged_batch(test::random_sequences({5, 4}, 97, 3));
  for (const Layout l : {Layout{1, 1}, Layout{2, 1}}) {
    if (!fits(l)) continue;
    INFO("tp=" << l.tp);
    Groups g(l);
    models::LlamaForCausalLM model = models::load_llama(test::llama_fixture("tiny_qwen2"), g.ctx, torch::kFloat64);
    const int64_t vocab = model->config().vocab_size;
    models::LogProbOptions opts{true, true, 5};
    CHECK_NOTHROW(model->log_probs(b.packed, b.packed_targets, opts));
    for (const int64_t bad : {vocab, int64_t{-1}}) {
      torch::Tensor targets = b.packed_targets.clone();
      targets[3] = bad;
      CHECK_THROWS_WITH(model->log_probs(b.packed, targets, opts),
                        Catch::Contains("target id " + std::to_string(bad) + " is outside the vocabulary [0, 97)"));
      models::PackedInput in = b.packed;
      in.input_ids = in.input_ids.clone();
      in.input_ids.view(-1)[2] = bad;
      CHECK_THROWS_WITH(model->log_probs(in, b.packed_targets, opts),
                        Catch::Contains("input id " + std::to_string(bad) + " is outside the vocabulary"));
      CHECK_THROWS_WITH(model->logits(in), Catch::Contains("input id " + std::to_string(bad)));
      torch::Tensor padded = b.padded_targets.clone();
      padded.view(-1)[1] = bad;
      CHECK_THROWS_WITH(model->log_probs(b.padded, padded, opts), Catch::Contains("target id " + std::to_string(bad)));
    }
  }
}
