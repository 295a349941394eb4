// The sampler on small random float64 models: greedy against a step-by-step full-prefix
// reference, the per-sample stream independent of batch composition and order, rollout log-probs
// equal to the training forward's, KV cache vs recompute, stops / lengths / vocab_limit, top-k /
// top-p, continuous batching, shared prompts and the KV plan, and the errors. The token choice
// itself (next_token.h) is in test_next_token.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "common/error.h"
#include "llama_test_util.h"
#include "models/llama/model.h"
#include "models/llama/next_token.h"
#include "models/llama/sampler.h"

using namespace tandem;
using models::Generation;
using models::GenerationRequest;
using models::SamplingParams;

namespace {

// GQA (4 query heads over 2 kv heads), uneven vocab, q/k/v bias; `tied` shares the lm head
// with the embedding. A wide init makes the next-token distributions far from uniform.
models::LlamaConfig sampler_config(bool tied = false, int64_t kv_heads = 2) {
  models::LlamaConfig c;
  c.vocab_size = 61, c.hidden_size = 32, c.num_layers = 2, c.num_heads = 4, c.num_kv_heads = kv_heads;
  c.intermediate_size = 40, c.max_seq_len = 96, c.qkv_bias = !tied, c.tie_embeddings = tied;
  c.initializer_range = 0.25;
  return c;
}

models::LlamaForCausalLM make_model(torch::Dtype dtype = torch::kFloat64, bool tied = false, int64_t kv_heads = 2) {
  models::LlamaForCausalLM m(sampler_config(tied, kv_heads), parallel::ParallelContext{}, 11);
  m->to(dtype);
  return m;
}

// `n` requests with prompts of 1..9 tokens and their own streams.
std::vector<GenerationRequest> make_requests(int64_t n, uint64_t seed = 3) {
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < n; ++i) lengths.push_back(1 + (i * 5 + 3) % 9);
  const auto prompts = test::random_sequences(lengths, 61, seed);
  std::vector<GenerationRequest> out;
  for (int64_t i = 0; i < n; ++i) out.push_back({prompts[i], models::sample_seed(seed, 0, i, 0)});
  return out;
}

SamplingParams sampling(double temperature = 1.0, int64_t max_new = 12) {
  SamplingParams p;
  p.temperature = temperature;
  p.max_new_tokens = max_new;
  return p;
}

// Greedy decoding by model->logits on the whole prefix, one token at a time.
std::vector<int64_t> greedy_reference(models::LlamaForCausalLM& model, std::vector<int64_t> seq, int64_t n,
                                      int64_t limit) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int64_t t = 0; t < n; ++t) {
    const torch::Tensor z = model->logits(test::ragged_batch({seq}).packed);  // (L, V)
    const int64_t next = z[-1].narrow(0, 0, limit).argmax().item<int64_t>();
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

// The training forward's log-prob of every response token (targets shifted by one).
std::vector<torch::Tensor> forward_logp(models::LlamaForCausalLM& model, const std::vector<GenerationRequest>& reqs,
                                        const std::vector<Generation>& gens) {
  std::vector<std::vector<int64_t>> seqs;
  for (size_t i = 0; i < reqs.size(); ++i) {
    seqs.push_back(reqs[i].prompt);
    seqs.back().insert(seqs.back().end(), gens[i].tokens.begin(), gens[i].tokens.end());
  }
  const test::RaggedBatch b = test::ragged_batch(seqs);
  torch::NoGradGuard no_grad;
  const torch::Tensor logp = model->log_probs(b.packed, b.packed_targets).logp;  // (N)
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const int64_t start = b.cu[i].item<int64_t>() + static_cast<int64_t>(reqs[i].prompt.size()) - 1;
    out.push_back(logp.narrow(0, start, static_cast<int64_t>(gens[i].tokens.size())));
  }
  return out;
}

torch::Tensor as_tensor(const std::vector<double>& v) { return torch::tensor(v, torch::kFloat64); }

// Same tokens and stop flags; log-probs within `tol` (max |a - b| / max(|b|, 1)). Tokens are compared
// exactly although batching may reassociate the float64 logits: a token could only change if a
// uniform draw fell within ~1e-15 of a CDF boundary.
void check_same(const std::vector<Generation>& a, const std::vector<Generation>& b, double tol) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("request " << i);
    CHECK(a[i].tokens == b[i].tokens);
    CHECK(a[i].stopped == b[i].stopped);
    REQUIRE(a[i].logp.size() == b[i].logp.size());
    CHECK(test::rel_floor1(as_tensor(a[i].logp), as_tensor(b[i].logp)) < tol);
  }
}

std::vector<Generation> pick(const std::vector<Generation>& g, const std::vector<size_t>& idx) {
  std::vector<Generation> out;
  for (size_t i : idx) out.push_back(g[i]);
  return out;
}

}  // namespace

TEST_CASE("sample_seed and the per-sample stream are fixed functions", "[sampler]") {
  CHECK(models::sample_seed(1, 2, 3, 4) == models::sample_seed(1, 2, 3, 4));
  std::set<uint64_t> seen;
  for (int64_t step = 0; step < 4; ++step)
    for (int64_t prompt = 0; prompt < 4; ++prompt)
      for (int64_t k = 0; k < 4; ++k) seen.insert(models::sample_seed(9, step, prompt, k));
  CHECK(seen.size() == 64);
  CHECK(models::sample_seed(0, 0, 0, 1) != models::sample_seed(0, 0, 1, 0));
  // SplitMix64's published first output for seed 0, and the pinned chain (the resume contract).
  CHECK(models::SampleStream(0).next_u64() == 0xE220A8397B1DCDAFULL);
  CHECK(models::sample_seed(1, 2, 3, 4) == 0xD55CCD4AEB3CCAFBULL);
  models::SampleStream s(5);
  for (int i = 0; i < 1000; ++i) {
    const double u = s.next_uniform();
    CHECK((u >= 0.0 && u < 1.0));
  }
}

TEST_CASE("greedy equals step-by-step argmax of model->logits on the full prefix", "[sampler]") {
  models::LlamaForCausalLM model = make_model();
  const auto reqs = make_requests(5);
  for (const int64_t limit : {int64_t{0}, int64_t{23}}) {
    INFO("vocab_limit " << limit);
    SamplingParams p = sampling(0.0, 10);
    p.vocab_limit = limit;
    const auto greedy = models::generate(*model, reqs, p);
    for (size_t i = 0; i < reqs.size(); ++i)
      CHECK(greedy[i].tokens == greedy_reference(model, reqs[i].prompt, 10, limit > 0 ? limit : 61));
    p.temperature = 1e-8;  // the limit of temperature -> 0, through the sampling path
    check_same(models::generate(*model, reqs, p), greedy, 1e-12);
    p.temperature = 1.0, p.top_k = 1;
    check_same(models::generate(*model, reqs, p), greedy, 1e-12);
    p.top_k = 0, p.top_p = 1e-9;
    check_same(models::generate(*model, reqs, p), greedy, 1e-12);
  }
}

TEST_CASE("a sample does not depend on the batch, max_batch or the order (float64)", "[sampler]") {
  models::LlamaForCausalLM model = make_model();
  const auto reqs = make_requests(9);
  SamplingParams p = sampling(1.0, 14);
  p.top_p = 0.95, p.top_k = 40;
  const auto all = models::generate(*model, reqs, p);
  // Not degenerate: the streams differ and the responses are long enough to diverge.
  std::set<std::vector<int64_t>> distinct;
  for (const auto& g : all) distinct.insert(g.tokens);
  CHECK(distinct.size() == reqs.size());
  for (const int64_t max_batch : {1, 2, 4}) {
    INFO("max_batch " << max_batch);
    SamplingParams q = p;
    q.max_batch = max_batch;
    check_same(models::generate(*model, reqs, q), all, 1e-12);
  }
  // Alone, and reversed.
  for (size_t i = 0; i < reqs.size(); ++i) check_same(models::generate(*model, {reqs[i]}, p), {all[i]}, 1e-12);
  std::vector<GenerationRequest> reversed(reqs.rbegin(), reqs.rend());
  std::vector<size_t> back;
  for (size_t i = reqs.size(); i-- > 0;) back.push_back(i);
  SamplingParams q = p;
  q.max_batch = 3;
  check_same(models::generate(*model, reversed, q), pick(all, back), 1e-12);
  // Among other requests (another step's samples), interleaved.
  auto others = make_requests(6, 99);
  std::vector<GenerationRequest> mixed;
  for (size_t i = 0; i < reqs.size(); ++i) {
    mixed.push_back(reqs[i]);
    if (i < others.size()) mixed.push_back(others[i]);
  }
  const auto mixed_out = models::generate(*model, mixed, q);
  std::vector<Generation> ours;
  for (size_t i = 0; i < mixed.size(); ++i)
    if (i % 2 == 0 || i >= 2 * others.size()) ours.push_back(mixed_out[i]);
  check_same(ours, all, 1e-12);
}

TEST_CASE("rollout log-probs equal the training forward's for the sampled tokens", "[sampler]") {
  const auto reqs = make_requests(6);
  for (const auto [dtype, tol] : {std::pair{torch::kFloat64, 1e-10}, std::pair{torch::kFloat32, 1e-4}}) {
    for (const bool tied : {false, true}) {
      INFO(c10::toString(dtype) << " tied " << tied);
      models::LlamaForCausalLM model = make_model(dtype, tied);
      for (const double temperature : {1.0, 0.7}) {
        SamplingParams p = sampling(temperature, 10);
        p.top_p = temperature == 1.0 ? 1.0 : 0.9;  // the log-prob stays the untempered, untruncated one
        p.max_batch = 4;
        const auto gens = models::generate(*model, reqs, p);
        const auto ref = forward_logp(model, reqs, gens);
        for (size_t i = 0; i < reqs.size(); ++i) CHECK(test::rel_floor1(as_tensor(gens[i].logp), ref[i]) < tol);
      }
    }
  }
}

TEST_CASE("KV cache and full recompute give the same tokens and log-probs (float64 1e-12)", "[sampler]") {
  const auto reqs = make_requests(7);
  for (const int64_t kv_heads : {1, 2, 4}) {
    for (const bool tied : {false, true}) {
      INFO("kv heads " << kv_heads << " tied " << tied);
      models::LlamaForCausalLM model = make_model(torch::kFloat64, tied, kv_heads);
      SamplingParams p = sampling(0.9, 16);
      p.top_k = 20, p.max_batch = 3, p.stop_ids = {5, 17};
      const auto cached = models::generate(*model, reqs, p);
      p.use_kv_cache = false;
      check_same(models::generate(*model, reqs, p), cached, 1e-12);
    }
  }
}

TEST_CASE("a bfloat16 model generates with float32 log-probs", "[sampler]") {
  models::LlamaForCausalLM model = make_model(torch::kBFloat16);
  const auto reqs = make_requests(4);
  SamplingParams p = sampling(1.0, 8);
  p.max_batch = 3;
  const auto gens = models::generate(*model, reqs, p);
  const auto ref = forward_logp(model, reqs, gens);
  for (size_t i = 0; i < reqs.size(); ++i) {
    CHECK(gens[i].tokens.size() == 8);
    for (int64_t t : gens[i].tokens) CHECK((t >= 0 && t < 61));
    CHECK(ref[i].scalar_type() == torch::kFloat32);
    // bfloat16 activations: the cached decode and the packed forward round differently.
    CHECK(test::rel_floor1(as_tensor(gens[i].logp), ref[i]) < 5e-2);
  }
}

TEST_CASE("stop ids and stop sequences end a response and stay in it", "[sampler]") {
  models::LlamaForCausalLM model = make_model();
  const auto reqs = make_requests(4);
  SamplingParams p = sampling(1.0, 24);
  const auto free_run = models::generate(*model, reqs, p);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::vector<int64_t>& full = free_run[i].tokens;
    REQUIRE(full.size() == 24);
    CHECK(!free_run[i].stopped);
    // A stop id: the response ends at its first occurrence.
    const int64_t id = full[5];
    const size_t at = std::find(full.begin(), full.end(), id) - full.begin();
    SamplingParams q = p;
    q.stop_ids = {id};
    const Generation g = models::generate(*model, {reqs[i]}, q)[0];
    CHECK(g.stopped);
    CHECK(g.tokens == std::vector<int64_t>(full.begin(), full.begin() + at + 1));
    const std::vector<double> prefix_logp(free_run[i].logp.begin(), free_run[i].logp.begin() + at + 1);
    CHECK(test::rel_floor1(as_tensor(g.logp), as_tensor(prefix_logp)) < 1e-12);
    // A stop sequence: ends at the first occurrence of the pair, not at its first token alone.
    const std::vector<int64_t> pair{full[10], full[11]};
    size_t end = 1;
    while (!(full[end - 1] == pair[0] && full[end] == pair[1])) ++end;
    q = p;
    q.stop_sequences = {pair, {60, 60, 60, 60}};
    const Generation s = models::generate(*model, {reqs[i]}, q)[0];
    CHECK(s.stopped);
    CHECK(s.tokens == std::vector<int64_t>(full.begin(), full.begin() + end + 1));
  }
}

TEST_CASE("max_new_tokens (shared and per request) and vocab_limit", "[sampler]") {
  models::LlamaForCausalLM model = make_model();
  auto reqs = make_requests(5);
  reqs[1].max_new_tokens = 0;
  reqs[2].max_new_tokens = 3;
  reqs[3].max_new_tokens = 30;
  SamplingParams p = sampling(2.0, 7);  // a hot distribution spreads over the vocabulary
  p.vocab_limit = 9;
  const auto gens = models::generate(*model, reqs, p);
  const std::vector<size_t> lengths{7, 0, 3, 30, 7};
  for (size_t i = 0; i < reqs.size(); ++i) {
    CHECK(gens[i].tokens.size() == lengths[i]);
    CHECK(gens[i].logp.size() == lengths[i]);
    CHECK(!gens[i].stopped);
    for (int64_t t : gens[i].tokens) CHECK((t >= 0 && t < 9));
  }
  std::set<int64_t> used;
  for (const auto& g : gens) used.insert(g.tokens.begin(), g.tokens.end());
  CHECK(used.size() > 4);
  // Log-probs stay over the whole vocabulary: the kept ids carry less than all the mass.
  const auto ref = forward_logp(model, reqs, gens);
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(test::rel_floor1(as_tensor(gens[i].logp), ref[i]) < 1e-10);
  CHECK(models::generate(*model, {}, p).empty());
}

TEST_CASE("top-k and top-p draw only from the kept tokens of each step", "[sampler]") {
  models::LlamaForCausalLM model = make_model();
  const auto reqs = make_requests(4);
  for (const auto [k, top_p] : {std::pair{int64_t{3}, 1.0}, std::pair{int64_t{0}, 0.6}}) {
    INFO("top_k " << k << " top_p " << top_p);
    SamplingParams p = sampling(1.3, 12);
    p.top_k = k, p.top_p = top_p;
    const auto gens = models::generate(*model, reqs, p);
    torch::NoGradGuard no_grad;
    std::set<int64_t> ranks;
    for (size_t i = 0; i < reqs.size(); ++i) {
      std::vector<int64_t> seq = reqs[i].prompt;
      for (int64_t t : gens[i].tokens) {
        const torch::Tensor z = model->logits(test::ragged_batch({seq}).packed)[-1];  // (V)
        const torch::Tensor probs = torch::softmax(z / 1.3, 0);
        const torch::Tensor sorted = std::get<0>(probs.sort(0, true));
        const int64_t rank = (probs > probs[t]).sum().item<int64_t>();  // tokens strictly more likely
        ranks.insert(rank);
        if (k > 0) CHECK(rank < k);
        if (top_p < 1) CHECK(sorted.narrow(0, 0, rank).sum().item<double>() < top_p);
        seq.push_back(t);
      }
    }
    CHECK(ranks.size() > 1);  // it did sample, not just argmax
  }
}

TEST_CASE("continuous batching: finished sequences leave, waiting prompts join", "[sampler]") {
  models::LlamaForCausalLM model = make_model();
  auto reqs = make_requests(5);
  const std::vector<int64_t> lengths{30, 3, 3, 3, 3};
  for (size_t i = 0; i < reqs.size(); ++i) reqs[i].max_new_tokens = lengths[i];
  SamplingParams p = sampling(1.0, 1);
  const auto together = models::generate(*model, reqs, p);
  for (const bool cache : {true, false}) {
    INFO("kv cache " << cache);
    p.max_batch = 2, p.use_kv_cache = cache;
    models::GenerationStats stats;
    const auto gens = models::generate(*model, reqs, p, &stats);
    // The long response's 29 decode steps carry the four short ones (joining one after another);
    // static batches of two would need 29 + 2 + 2.
    CHECK(stats.decode_steps == 29);
    CHECK(stats.prefills == 4);
    CHECK(stats.max_live == 2);
    CHECK(stats.generated_tokens == 42);
    check_same(gens, together, 1e-12);
  }
  // Requests that finish on their first token keep the queue moving.
  SamplingParams one = sampling(1.0, 1);
  one.max_batch = 2;
  models::GenerationStats stats;
  const auto short_gens = models::generate(*model, make_requests(5), one, &stats);
  CHECK(stats.decode_steps == 0);
  CHECK(stats.prefills == 3);
  for (const auto& g : short_gens) CHECK(g.tokens.size() == 1);
}

TEST_CASE("invalid sampling params and prompts are UserErrors", "[sampler]") {
  models::LlamaForCausalLM model = make_model();
  const auto reqs = make_requests(2);
  const auto fails = [&](SamplingParams p, std::vector<GenerationRequest> r, const std::string& needle) {
    INFO(needle);
    CHECK_THROWS_WITH(models::generate(*model, r, p), Catch::Contains(needle));
    CHECK_THROWS_AS(models::generate(*model, r, p), UserError);
  };
  SamplingParams p = sampling();
  p.temperature = -1;
  fails(p, reqs, "temperature");
  p = sampling(), p.top_p = 0;
  fails(p, reqs, "top_p");
  p.top_p = 1.5;
  fails(p, reqs, "top_p");
  p = sampling(), p.top_k = -1;
  fails(p, reqs, "top_k");
  p = sampling(), p.max_batch = 0;
  fails(p, reqs, "max_batch");
  p = sampling(), p.stop_sequences = {{}};
  fails(p, reqs, "stop sequence");
  auto bad = reqs;
  bad[1].prompt.clear();
  fails(sampling(), bad, "empty prompt");
  bad = reqs, bad[0].prompt[0] = 61;
  fails(sampling(), bad, "outside the vocabulary");
  bad = reqs, bad[0].max_new_tokens = 96;
  fails(sampling(), bad, "max_seq_len");
}

TEST_CASE("a group's prompt prefilled once gives the samples of separate prefills (float64)", "[sampler][share]") {
  models::LlamaForCausalLM model = make_model();
  // Groups of 4 samples (their own streams) of 3 prompts, groups interleaved with a lone prompt,
  // and max_batch = max_live = 6, so one group is split across admissions.
  const auto prompts = make_requests(4, 17);
  std::vector<GenerationRequest> reqs;
  for (int64_t g = 0; g < 3; ++g)
    for (int64_t k = 0; k < 4; ++k) reqs.push_back({prompts[g].prompt, models::sample_seed(5, 0, g, k)});
  reqs.push_back(prompts[3]);
  for (const double temperature : {1.0, 0.0}) {
    INFO("temperature " << temperature);
    SamplingParams p = sampling(temperature, 10);
    p.max_batch = 6, p.max_live = 6;
    models::GenerationStats alone_stats, shared_stats;
    const auto alone = models::generate(*model, reqs, p, &alone_stats);
    p.share_prompts = true;
    const auto shared = models::generate(*model, reqs, p, &shared_stats);
    check_same(shared, alone, 1e-12);
    // Prefilled fewer prompt tokens: each group once per admission it spans.
    CHECK(shared_stats.prefill_tokens < alone_stats.prefill_tokens);
    if (temperature > 0) {  // not degenerate: a group's samples differ from each other
      std::set<std::vector<int64_t>> group0;
      for (int64_t k = 0; k < 4; ++k) group0.insert(shared[k].tokens);
      CHECK(group0.size() > 1);
    }
  }
}

TEST_CASE("under continuous batching a group's later samples fork a live sample's prompt (float64)",
          "[sampler][share]") {
  models::LlamaForCausalLM model = make_model();
  // Two slots (max_live 2) and 4 samples per prompt of shrinking lengths: each sample is admitted when one
  // before it retires, while another of its group is still decoding.
  const auto prompts = make_requests(3, 29);
  std::vector<GenerationRequest> reqs;
  int64_t distinct = 0;
  for (int64_t g = 0; g < 3; ++g) {
    distinct += static_cast<int64_t>(prompts[g].prompt.size());
    for (int64_t k = 0; k < 4; ++k) {
      reqs.push_back({prompts[g].prompt, models::sample_seed(7, 0, g, k)});
      reqs.back().max_new_tokens = 9 - 2 * k;
    }
  }
  for (const double temperature : {1.0, 0.0}) {
    INFO("temperature " << temperature);
    SamplingParams p = sampling(temperature, 10);
    p.max_batch = 2, p.max_live = 2;
    const auto alone = models::generate(*model, reqs, p);
    p.share_prompts = true;
    models::GenerationStats stats;
    const auto shared = models::generate(*model, reqs, p, &stats);
    check_same(shared, alone, 1e-12);
    CHECK(stats.prefill_tokens == distinct);  // each prompt prefilled exactly once
  }
}

TEST_CASE("shared prompts decode more sequences in the unshared KV memory, with the same samples (float64)",
          "[sampler][share]") {
  models::LlamaForCausalLM model = make_model();
  // 3 groups of 8 samples of 20-token prompts, 6 new tokens each, max_batch 4. Unshared: 4 slots
  // of 26 rows = 104 rows per layer. Shared: S slots of 6 rows plus min(S, 3) prompts of 20 rows:
  // S = 7 takes 102 rows, S = 8 would take 108.
  const auto prompts = test::random_sequences({20, 20, 20}, 61, 41);
  std::vector<GenerationRequest> reqs;
  for (int64_t g = 0; g < 3; ++g)
    for (int64_t k = 0; k < 8; ++k) reqs.push_back({prompts[g], models::sample_seed(9, 0, g, k)});
  SamplingParams p = sampling(1.0, 6);
  p.max_batch = 4;
  models::GenerationStats alone_stats, shared_stats;
  const auto alone = models::generate(*model, reqs, p, &alone_stats);
  CHECK(alone_stats.kv_slots == 4);
  CHECK(alone_stats.kv_rows == 104);
  CHECK(alone_stats.max_live == 4);
  p.share_prompts = true;
  const auto shared = models::generate(*model, reqs, p, &shared_stats);
  check_same(shared, alone, 1e-12);
  CHECK(shared_stats.kv_slots == 7);
  CHECK(shared_stats.kv_rows == 7 * 6 + 3 * 20);
  CHECK(shared_stats.max_live == 7);
  CHECK(shared_stats.decode_steps < alone_stats.decode_steps);

  SECTION("max_live caps the slots") {
    p.max_live = 5;
    const models::KvPlan plan = models::kv_plan(reqs, p);
    CHECK(plan.slots == 5);
    CHECK(plan.prefix_slots == 3);
    check_same(models::generate(*model, reqs, p), alone, 1e-12);
  }
  SECTION("all prompts distinct: no more slots than unshared, never fewer") {
    std::vector<GenerationRequest> distinct;
    const auto lone = test::random_sequences(std::vector<int64_t>(12, 20), 61, 43);
    for (int64_t i = 0; i < 12; ++i) distinct.push_back({lone[i], models::sample_seed(9, 1, i, 0)});
    const models::KvPlan plan = models::kv_plan(distinct, p);
    CHECK(plan.slots == 4);
    CHECK(plan.prefix_slots == 4);
    CHECK(plan.rows() == 104);
    // A longest prompt and a longest response from different requests: the shared layout needs
    // more rows per slot than the unshared capacity, and keeps the unshared slot count.
    distinct[0].prompt.resize(30), distinct[1].max_new_tokens = 30;
    const models::KvPlan odd = models::kv_plan(distinct, p);
    CHECK(odd.slots == 4);
    CHECK(odd.capacity == 30);
    CHECK(odd.prefix_capacity == 30);
  }
  SECTION("control: the plan without sharing is the unshared one") {
    p.share_prompts = false;
    const models::KvPlan plan = models::kv_plan(reqs, p);
    CHECK(plan.slots == 4);
    CHECK(plan.prefix_slots == 0);
    CHECK(plan.rows() == 104);
  }
}
