// `tandem bench rollout`: sampler throughput on a random-init Llama, printed as one JSON object:
// KV cache vs full recompute on the same requests, and continuous vs static batching on a
// long-tail (lognormal) mix of response lengths; plus the thread count and a GEMM figure, since
// BLAS speed differs per machine. With --lengths, only that workload's groups instead, each
// group's prompt prefilled once (--share-prompt auto) or per sample (off), or both alternating.
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <random>

#include "apps/bench_lengths.h"
#include "apps/bench_util.h"
#include "apps/commands.h"
#include "apps/profile_scope.h"
#include "common/error.h"
#include "models/llama/lora.h"
#include "models/llama/model.h"
#include "models/llama/sampler.h"
#include "runtime/blas_kernel.h"
#include "runtime/host_memory.h"

namespace tandem::app {

namespace {

constexpr double kTwoPi = 6.283185307179586;

struct Timed {
  std::vector<models::Generation> gens;
  models::GenerationStats stats;
  double seconds = 0;
};

Timed timed_generate(models::LlamaForCausalLMImpl& model, const std::vector<models::GenerationRequest>& reqs,
                     const models::SamplingParams& p) {
  Timed t;
  const auto t0 = Clock::now();
  t.gens = models::generate(model, reqs, p, &t.stats);
  t.seconds = seconds_since(t0);
  return t;
}

nlohmann::json rate(int64_t tokens, double seconds) {
  return {{"tokens", tokens}, {"seconds", seconds}, {"tokens_per_s", tokens / seconds}};
}

// Response lengths with a long tail: lognormal around max_new / 4, clamped to [1, max_new].
std::vector<int64_t> long_tail_lengths(int64_t n, int64_t max_new, double sigma, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  std::vector<int64_t> out;
  const double mu = std::log(std::max(1.0, max_new / 4.0));
  for (int64_t i = 0; i < n; ++i) {
    const double normal = std::sqrt(-2.0 * std::log(1.0 - uni(gen))) * std::cos(kTwoPi * uni(gen));
    out.push_back(std::clamp<int64_t>(std::llround(std::exp(mu + sigma * normal)), 1, max_new));
  }
  return out;
}

// The --lengths workload: random prompts, one per group, every response exactly its length (no
// stop token), sampled at temperature 1 with each sample's own stream; tokens/s counts the
// prompt and response tokens of every sequence (the unshared batch's real tokens).
nlohmann::json share_workload(models::LlamaForCausalLMImpl& model, const std::vector<SequenceSpec>& specs,
                              const BenchRolloutArgs& a) {
  std::mt19937_64 gen(a.seed + 3);
  std::uniform_int_distribution<int64_t> token(0, a.vocab - 1);
  std::map<int64_t, std::vector<int64_t>> prompts;
  std::map<int64_t, int64_t> members;
  std::vector<models::GenerationRequest> reqs;
  int64_t tokens = 0, generated = 0, longest = 0;
  for (const SequenceSpec& sp : specs) {
    auto [it, fresh] = prompts.emplace(sp.group, std::vector<int64_t>{});
    if (fresh)
      for (int64_t t = 0; t < sp.prompt; ++t) it->second.push_back(token(gen));
    reqs.push_back({it->second, models::sample_seed(a.seed, 0, sp.group, members[sp.group]++)});
    reqs.back().max_new_tokens = sp.response;
    tokens += sp.length(), generated += sp.response, longest = std::max(longest, sp.response);
  }
  models::SamplingParams p;
  p.temperature = 1.0;
  p.max_new_tokens = longest;
  p.max_batch = a.batch;
  p.max_live = a.max_live;
  models::generate(model, {reqs.front()}, p);  // warm-up: allocator, BLAS threads

  struct Variant {
    bool share;
    bool lora;            // adapters on (a model without adapters has only lora = false variants)
    bool kernel = true;   // with adapters: the host decode kernel (parallel/lora_decode.h) or ATen's GEMMs
    bool packed = true;   // the sampler's packed bf16 weights where the host packs (parallel/packed_weights.h)
    bool vector = false;  // with adapters, on an AMX host: the AVX-512 kernel in place of AMX's
    std::vector<double> seconds;
    Timed last;
    std::string name() const {
      return std::string(share ? "shared" : "unshared") + (lora ? "_lora" : "") + (lora && !kernel ? "_aten" : "") +
             (vector ? "_avx512" : "") + (packed ? "" : "_unpacked");
    }
  };
  std::vector<Variant> variants;
  for (const bool share : {false, true}) {
    if ((a.share_prompt == "auto" && !share) || (a.share_prompt == "off" && share)) continue;
    variants.push_back({share, false});
    if (a.compare_packed) variants.push_back({share, false, true, false});
    if (a.lora_rank > 0) variants.push_back({share, true, false}), variants.push_back({share, true});
    if (a.lora_rank > 0 && parallel::best_lora_decode_isa() == parallel::LoraDecodeIsa::kAmx)
      variants.push_back({share, true, true, true, true});
  }
  const auto run_variant = [&](const Variant& v) {
    p.share_prompts = v.share;
    parallel::LoraModeGuard adapters(v.lora);  // off: the base model's exact forward
    parallel::LoraDecodeKernelGuard kernel(v.kernel);
    parallel::PackedSamplingGuard packed(v.packed);
    std::optional<parallel::LoraDecodeIsaGuard> isa;
    if (v.vector) isa.emplace(parallel::LoraDecodeIsa::kAvx512);
    return timed_generate(model, reqs, p);
  };
  for (int64_t r = 0; r < a.repeats; ++r) {
    for (Variant& v : variants) {  // alternating, so the machine's drift hits all alike
      v.last = run_variant(v);
      v.seconds.push_back(v.last.seconds);
    }
  }
  nlohmann::json out;
  out["workload"] = {{"sequences", specs.size()},     {"groups", prompts.size()}, {"tokens", tokens},
                     {"generated_tokens", generated}, {"batch", a.batch},         {"max_live", a.max_live},
                     {"repeats", a.repeats},          {"lora_rank", a.lora_rank}};
  for (const Variant& v : variants) {
    const double t = median(v.seconds);
    out[v.name()] = {{"seconds", t},
                     {"seconds_per_repeat", v.seconds},
                     {"tokens_per_s", tokens / t},
                     {"generated_tokens_per_s", generated / t},
                     {"prefill_tokens", v.last.stats.prefill_tokens},
                     {"prefills", v.last.stats.prefills},
                     {"decode_steps", v.last.stats.decode_steps},
                     {"kv_slots", v.last.stats.kv_slots},
                     {"kv_rows_per_layer", v.last.stats.kv_rows},
                     {"most_live", v.last.stats.max_live}};
  }
  if (!a.profile_path.empty()) {  // one more run of the last variant, profiled and not timed
    ProfileScope profile(a.profile_path);
    run_variant(variants.back());
  }
  // Median over repeats of the per-repeat ratio of two variants' times (side by side in each repeat).
  const auto ratio = [&](const Variant& num, const Variant& den, const std::string& key) {
    std::vector<double> ratios;
    for (int64_t r = 0; r < a.repeats; ++r) ratios.push_back(num.seconds[r] / den.seconds[r]);
    out[key] = median(ratios);
    out[key + "_per_repeat"] = ratios;
  };
  const auto find = [&](bool share, bool lora, bool kernel = true, bool packed = true,
                        bool vector = false) -> const Variant* {
    for (const Variant& v : variants)
      if (v.share == share && v.lora == lora && v.kernel == kernel && v.packed == packed && v.vector == vector)
        return &v;
    return nullptr;
  };
  if (find(false, false) && find(true, false)) {
    ratio(*find(false, false), *find(true, false), "share_speedup");
    const Timed& off = find(false, false)->last;
    const Timed& on = find(true, false)->last;
    int64_t same = 0;
    for (size_t i = 0; i < reqs.size(); ++i) same += off.gens[i].tokens == on.gens[i].tokens;
    out["same_responses"] = same;  // of "sequences": sharing must not change what is sampled
  }
  out["packs"] = parallel::packed_sampling_supported();  // false: the _unpacked variants run the same path
  for (const bool share : {false, true})
    if (find(share, false, true, false))
      ratio(*find(share, false, true, false), *find(share, false),
            std::string(share ? "shared" : "unshared") + "_packed_speedup");
  for (const bool share : {false, true})
    if (find(share, true)) {
      const std::string name = share ? "shared" : "unshared";
      ratio(*find(share, true), *find(share, false), name + "_lora_slowdown");
      ratio(*find(share, true, false), *find(share, false), name + "_lora_aten_slowdown");
      ratio(*find(share, true, false), *find(share, true), name + "_lora_kernel_speedup");
      if (find(share, true, true, true, true))
        ratio(*find(share, true, true, true, true), *find(share, true), name + "_lora_amx_speedup");
    }
  return out;
}

void check_args(const BenchRolloutArgs& a) {
  const auto positive = [](const char* name, int64_t v) {
    if (v < 1) throw UserError(std::string(name) + " must be >= 1, got " + std::to_string(v));
  };
  positive("--hidden-size", a.hidden_size), positive("--layers", a.layers), positive("--heads", a.heads);
  positive("--kv-heads", a.kv_heads), positive("--vocab", a.vocab), positive("--prompt-len", a.prompt_len);
  positive("--max-new-tokens", a.max_new_tokens), positive("--batch", a.batch), positive("--requests", a.requests);
  positive("--max-live", a.max_live);
  positive("--repeats", a.repeats);
  if (a.lora_rank > 0 && a.lengths_path.empty()) throw UserError("--lora-rank needs --lengths (the workload it times)");
  if (a.compare_packed && a.lengths_path.empty())
    throw UserError("--compare-packed needs --lengths (the workload it times)");
  if (!(a.tail_sigma >= 0)) throw UserError("--tail-sigma must be >= 0");
  if (a.dtype != "float32" && a.dtype != "float64" && a.dtype != "bfloat16")
    throw UserError("--dtype must be float32, float64 or bfloat16");
}

}  // namespace

int run_bench_rollout(const BenchRolloutArgs& a) {
  check_args(a);
  if (a.threads > 0) torch::set_num_threads(static_cast<int>(a.threads));
  torch::manual_seed(a.seed);
  models::LlamaConfig c;
  c.vocab_size = a.vocab, c.hidden_size = a.hidden_size, c.num_layers = a.layers, c.num_heads = a.heads;
  c.num_kv_heads = a.kv_heads;
  c.attention = *models::parse_attention_kernel(a.attention);  // CLI11 checked the name
  c.intermediate_size = a.intermediate_size > 0 ? a.intermediate_size : (a.hidden_size * 8 / 3 + 63) / 64 * 64;
  c.max_seq_len = a.prompt_len + a.max_new_tokens;
  std::vector<SequenceSpec> specs;
  if (!a.lengths_path.empty()) {
    specs = read_lengths(a.lengths_path);
    c.max_seq_len = 0;
    for (const SequenceSpec& sp : specs) c.max_seq_len = std::max(c.max_seq_len, sp.length());
  }
  c.validate();
  models::LlamaForCausalLM model(c, parallel::ParallelContext{}, a.seed);
  const torch::ScalarType dtype = a.dtype == "float64"    ? torch::kFloat64
                                  : a.dtype == "bfloat16" ? torch::kBFloat16
                                                          : torch::kFloat32;
  model->to(dtype);
  if (a.lora_rank > 0) {
    models::attach_lora(*model, bench_lora_spec(a.lora_rank), a.seed + 4);
    // B as a trained adapter's (peft starts it at zero): the sampler does the same work either way.
    torch::NoGradGuard no_grad;
    const std::vector<torch::Tensor> factors = models::lora_parameters(*model);  // A, B of each layer
    for (size_t i = 1; i < factors.size(); i += 2) factors[i].normal_(0.0, 0.02);
  }
  nlohmann::json out;
  out["threads"] = torch::get_num_threads();
  out["attention"] = a.attention;
  out["blas"] = blas_description();
  out["host_memory"] = host_memory_description();
  out["gemm512_f32_gflops"] = gemm_gflops();
  out["dtype"] = a.dtype;
  out["model"] = {{"hidden_size", c.hidden_size}, {"layers", c.num_layers}, {"heads", c.num_heads},
                  {"kv_heads", c.num_kv_heads},   {"vocab", c.vocab_size},  {"intermediate_size", c.intermediate_size}};
  if (!specs.empty()) {
    out["share_prompt"] = share_workload(*model, specs, a);
    std::cout << out.dump() << std::endl;
    return 0;
  }

  std::vector<models::GenerationRequest> reqs;
  at::Generator gen = at::detail::createCPUGenerator(a.seed + 1);
  for (int64_t i = 0; i < a.requests; ++i) {
    const torch::Tensor ids = torch::randint(a.vocab, {a.prompt_len}, gen, torch::kInt64);
    reqs.push_back({std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + a.prompt_len),
                    models::sample_seed(a.seed, 0, i, 0)});
  }
  models::SamplingParams p;
  p.temperature = 1.0;
  p.max_new_tokens = a.max_new_tokens;
  p.max_batch = a.batch;
  models::generate(*model, {reqs.front()}, p);  // warm-up: allocator, BLAS threads

  // KV cache vs recomputing the whole prefix for every token, on the same requests.
  const Timed cached = timed_generate(*model, reqs, p);
  p.use_kv_cache = false;
  const Timed recompute = timed_generate(*model, reqs, p);
  p.use_kv_cache = true;
  int64_t same = 0;
  for (size_t i = 0; i < reqs.size(); ++i) same += cached.gens[i].tokens == recompute.gens[i].tokens;

  // Long tail: continuous batching vs static batches that decode until their longest member ends.
  const std::vector<int64_t> lengths = long_tail_lengths(a.requests, a.max_new_tokens, a.tail_sigma, a.seed + 2);
  int64_t useful = 0;
  for (size_t i = 0; i < reqs.size(); ++i) reqs[i].max_new_tokens = lengths[i], useful += lengths[i];
  const Timed continuous = timed_generate(*model, reqs, p);
  double static_s = 0;
  int64_t static_steps = 0;
  const size_t batch = static_cast<size_t>(a.batch);
  for (size_t b = 0; b < reqs.size(); b += batch) {
    std::vector<models::GenerationRequest> chunk(reqs.begin() + b, reqs.begin() + std::min(reqs.size(), b + batch));
    int64_t longest = 0;
    for (const auto& r : chunk) longest = std::max(longest, r.max_new_tokens);
    for (auto& r : chunk) r.max_new_tokens = longest;  // finished members keep their slot busy
    const Timed t = timed_generate(*model, chunk, p);
    static_s += t.seconds;
    static_steps += t.stats.decode_steps;
  }

  out["prompt_len"] = a.prompt_len;
  out["max_new_tokens"] = a.max_new_tokens;
  out["batch"] = a.batch;
  out["requests"] = a.requests;
  out["kv_cache"] = rate(cached.stats.generated_tokens, cached.seconds);
  out["no_cache"] = rate(recompute.stats.generated_tokens, recompute.seconds);
  out["kv_cache_speedup"] = recompute.seconds / cached.seconds * cached.stats.generated_tokens /
                            std::max<int64_t>(1, recompute.stats.generated_tokens);
  out["kv_vs_recompute_same_responses"] = same;
  const double mean_len = static_cast<double>(useful) / a.requests;
  out["long_tail"] = {
      {"sigma", a.tail_sigma},
      {"mean_len", mean_len},
      {"max_len", *std::max_element(lengths.begin(), lengths.end())},
      {"continuous", rate(useful, continuous.seconds)},
      {"static", rate(useful, static_s)},
      {"continuous_speedup", static_s / continuous.seconds},
      {"continuous_decode_steps", continuous.stats.decode_steps},
      {"static_decode_steps", static_steps},
  };
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace tandem::app
