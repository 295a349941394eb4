// `tandem bench train`: one GRPO training step (forward, chunked log-prob, clipped policy loss,
// backward, grad clip, AdamW) of a random-init Llama on a workload the user states (lengths
// files: apps/bench_lengths.h), so the figure can be set beside other implementations. With
// --share-prompt compare, the same step with each group's prompt laid out once and per sample,
// steps alternating, and their paired speedup. Prints one JSON object: real-token throughput, the step split,
// model FLOPs by the usual formula, achieved GFLOP/s, the torch.mm peak at 2048^2 on the same
// threads (measured beside every timed step) and MFU = achieved / peak. Old log-probs are
// recomputed once before timing (so the first update's ratio is 1, as in training); the timed
// steps are what an update costs. --profile runs one more step under the LibTorch profiler. With
// --lora-rank the base is frozen and rank-R all-linear adapters train (LoRA), the same step otherwise.
// peak_rss_gib is the process's peak resident memory (weights, AdamW state, the step's
// activations): what --attention and --recompute change.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <map>
#include <random>

#include <sys/resource.h>

#include "apps/bench_lengths.h"
#include "apps/bench_util.h"
#include "apps/commands.h"
#include "apps/profile_scope.h"
#include "common/error.h"
#include "core/batch/collate.h"
#include "core/batch/exchange.h"
#include "core/batch/schedule.h"
#include "core/grpo/adamw_state.h"
#include "core/grpo/policy_update.h"
#include "core/policies/llama_policy.h"
#include "parallel/process_groups.h"
#include "parallel/runtime.h"
#include "parallel/vocab_parallel_logprob.h"
#include "runtime/blas_kernel.h"
#include "runtime/cpu_threads.h"
#include "runtime/device_stats.h"
#include "runtime/host_memory.h"

namespace tandem::app {

namespace {

// Minor page faults and system CPU seconds of this process so far.
std::pair<double, double> faults_and_system_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return {static_cast<double>(u.ru_minflt), static_cast<double>(u.ru_stime.tv_sec) + 1e-6 * u.ru_stime.tv_usec};
}

models::LlamaConfig model_config(const BenchTrainArgs& a, int64_t max_len) {
  models::LlamaConfig c;
  c.vocab_size = a.vocab, c.hidden_size = a.hidden, c.num_layers = a.layers, c.num_heads = a.heads;
  c.num_kv_heads = a.kv_heads > 0 ? a.kv_heads : a.heads;
  c.intermediate_size = a.ffn > 0 ? a.ffn : (a.hidden * 8 / 3 + 63) / 64 * 64;
  c.max_seq_len = max_len;
  c.attention = *models::parse_attention_kernel(a.attention);  // CLI11 checked the name
  c.recompute_layers = a.recompute == "layers";
  try {
    c.validate();
  } catch (const std::exception& e) {
    throw UserError(std::string("bench train: model dims: ") + e.what());
  }
  return c;
}

// Random tokens, one random prompt per group; advantages of +-1.
std::vector<ArSample> make_samples(const std::vector<SequenceSpec>& specs, int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  std::map<int64_t, std::vector<int64_t>> prompts;
  std::vector<ArSample> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto [it, fresh] = prompts.emplace(specs[i].group, std::vector<int64_t>{});
    if (fresh)
      for (int64_t t = 0; t < specs[i].prompt; ++t) it->second.push_back(token(gen));
    ArSample s;
    s.tokens = it->second;
    for (int64_t t = 0; t < specs[i].response; ++t) s.tokens.push_back(token(gen));
    s.prompt_len = specs[i].prompt;
    s.response_mask.assign(static_cast<size_t>(specs[i].response), 1);
    s.rollout_logp.assign(s.response_mask.size(), 0.0);
    s.advantage = (gen() & 1) ? 1.0 : -1.0;
    s.group_id = specs[i].group;
    s.index = static_cast<int64_t>(i);
    out.push_back(std::move(s));
  }
  return out;
}

// The base's weights a token is multiplied by: its matrices but the input embedding table (unless
// it is tied to the lm head, in which case it is the lm head). Norm weights are not matmuls, and
// the adapters' factors, about 4-5% of a LoRA step's FLOPs at rank 32, are not counted.
int64_t matmul_params(models::LlamaForCausalLMImpl& model) {
  int64_t n = 0;
  for (const auto& p : model.named_parameters())
    if (p.value().dim() == 2 && !models::is_lora_parameter(p.key())) n += p.value().numel();
  if (!model.config().tie_embeddings) n -= model.model->embed_tokens->weight.numel();
  return n;
}

}  // namespace

int run_bench_train(const BenchTrainArgs& a, int argc, char** argv) {
  parallel::MpiRuntime mpi(&argc, &argv);
  if (mpi.size() != 1) throw UserError("bench train runs on one process (no mpirun)");
  const std::optional<BatchLayout> layout = parse_enum<BatchLayout>(a.layout);
  if (!layout) throw UserError("--layout must be packed, padded or auto");
  if (a.steps < 1 || a.warmup < 0) throw UserError("--steps must be >= 1 and --warmup >= 0");
  if (a.share_prompt != "off" && a.share_prompt != "auto" && a.share_prompt != "compare")
    throw UserError("--share-prompt must be off, auto or compare, not '" + a.share_prompt + "'");
  if (a.micro_batch_size && a.max_tokens_per_micro)
    throw UserError("give --micro-batch-size or --max-tokens-per-micro, not both");
  torch::set_num_threads(a.threads > 0 ? a.threads : static_cast<int>(intra_op_threads(cpu_budget(), 1)));
  torch::manual_seed(a.seed);

  const std::vector<SequenceSpec> specs = read_lengths(a.lengths_path);
  int64_t max_len = 0;
  for (const auto& sp : specs) max_len = std::max(max_len, sp.length());
  const models::LlamaConfig mc = model_config(a, max_len);
  if (mc.recompute_layers) return_freed_host_memory("--recompute layers");  // as train does
  models::LlamaForCausalLM model(mc, parallel::ParallelContext{}, static_cast<uint64_t>(a.seed));
  const torch::Device device = a.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  if (device.is_cuda() && !torch::cuda::is_available())
    throw UserError("bench train --device cuda: no GPU is visible to this LibTorch; use --device cpu");
  const torch::Dtype dtype = a.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  model->to(dtype);
  model->to(device);
  reset_device_peak(device);
  // The peak the MFU is taken against: the host's float32 BLAS GEMM as before, else a GEMM in the
  // run's dtype on its device (8192^3 on a GPU).
  const bool host_blas_peak = device.is_cpu() && dtype == torch::kFloat32;
  const auto measure_peak = [&] { return host_blas_peak ? gemm_gflops(2048, 3) : peak_gflops(device, dtype); };
  models::LogProbOptions lo;
  lo.save_logits_max_bytes = a.save_logits_mib << 20;
  lo.chunk_tokens = a.logits_chunk_tokens;
  models::LoraSpec lora;
  if (a.lora_rank > 0) {
    lora = bench_lora_spec(a.lora_rank);
    models::attach_lora(*model, lora, static_cast<uint64_t>(a.seed) + 1);
  }
  const auto policy_ptr = a.lora_rank > 0 ? std::make_unique<LlamaPolicy>(model, lo, lora, nlohmann::json{})
                                          : std::make_unique<LlamaPolicy>(model, lo);
  LlamaPolicy& policy = *policy_ptr;
  const std::vector<ArSample> samples = make_samples(specs, a.vocab, static_cast<uint64_t>(a.seed));
  std::vector<SampleCost> costs;
  for (const auto& s : samples) costs.push_back(cost_of(s));
  const auto micro_samples = [&](const MicroBatch& m) {
    std::vector<const ArSample*> out;
    for (int64_t i : m.samples) out.push_back(&samples[static_cast<size_t>(i)]);
    return out;
  };

  // A variant: the schedule with prompts shared or not, and its micros' old log-probs.
  struct Variant {
    bool share = false;
    std::vector<MicroBatch> micros;
    std::vector<torch::Tensor> old_logp;
    std::vector<double> step_s, fwd_s, bwd_s, opt_s, faults, system_s, mfu;
    int64_t micro_tokens = 0;
  };
  std::vector<Variant> variants;
  for (const bool share : {false, true}) {
    if ((share && a.share_prompt == "off") || (!share && a.share_prompt == "auto")) continue;
    Variant v;
    v.share = share;
    ScheduleOptions so;
    so.micro_batch_size = a.micro_batch_size;
    so.max_tokens_per_micro = a.max_tokens_per_micro;
    if (!so.micro_batch_size && !so.max_tokens_per_micro) so.micro_batch_size = static_cast<int64_t>(samples.size());
    so.layout = *layout;
    so.share_prompts = share;
    so.l_norm = static_cast<double>(max_len);
    v.micros = build_schedule(costs, so).minis[0].ranks[0].micros;
    torch::NoGradGuard no_grad;
    for (const auto& m : v.micros) {
      const auto s = micro_samples(m);
      v.micro_tokens += m.tokens;
      v.old_logp.push_back(
          m.padded
              ? policy.forward_padded(collate_padded(s, m.denominators, torch::kFloat32), false).logp
              : policy.forward_packed(collate_packed(s, m.denominators, torch::kFloat32, m.share_prompts), false).logp);
    }
    variants.push_back(std::move(v));
  }
  const auto dims = parallel::ParallelDims::resolve(1, 1, 1, 1);
  parallel::ProcessGroups groups(MPI_COMM_WORLD, dims);
  auto comm = parallel::make_mpi_communicator(groups, parallel::Axis::kWorld, 600);
  const std::vector<torch::Tensor> params = policy.parameters();
  torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(1e-5));
  allocate_optimizer_state(optimizer);  // as train does: below the first step's activations

  UpdateOptions uo;  // the quickstart's objective: token-mean, clip 0.2 / 0.28, no KL
  uo.policy.clip_low = 0.2, uo.policy.clip_high = 0.28;
  uo.fuse_head = a.fused_head;
  int64_t tokens = 0, padded_micros = 0;
  double sum_sq = 0;
  for (const auto& sp : specs) {
    tokens += sp.length();
    sum_sq += static_cast<double>(sp.length()) * static_cast<double>(sp.length());
  }
  for (const auto& m : variants.front().micros) padded_micros += m.padded ? 1 : 0;
  const int64_t n_params = matmul_params(*model);
  // The FLOPs of the unshared batch: what a sharing step computes in less time.
  // LoRA's frozen base computes no weight gradients: 4 of the 6 FLOPs per weight and token.
  const double flops = (a.lora_rank > 0 ? 4.0 : 6.0) * static_cast<double>(n_params) * static_cast<double>(tokens) +
                       12.0 * static_cast<double>(mc.num_layers * mc.hidden_size) * sum_sq;

  // The GEMM peak is measured before the first timed step and after every one, so each step's
  // MFU is taken against the higher of the two measurements beside it: this VM's speed drifts
  // within minutes, and a peak measured once would fold that drift into the ratio. With two
  // variants their steps alternate, so drift hits both alike.
  std::vector<double> peaks;
  const bool profile_step = !a.profile_path.empty();
  for (int64_t step = 0; step < a.warmup + a.steps + (profile_step ? 1 : 0); ++step) {
    for (Variant& v : variants) {
      // One step more after the timed ones, profiled and not timed: recording every operator slows it.
      const bool profiled = profile_step && step == a.warmup + a.steps;
      std::optional<ProfileScope> profile;
      if (profiled) profile.emplace(a.profile_path);
      if (step == a.warmup && peaks.empty()) peaks.push_back(measure_peak());
      const auto [faults0, system0] = faults_and_system_s();
      synchronize(device);
      const auto t0 = Clock::now();
      MicroOutcome total;
      for (size_t k = 0; k < v.micros.size(); ++k) {
        uo.packed = !v.micros[k].padded;
        uo.share_prompts = v.micros[k].share_prompts;
        total += train_micro(policy, micro_samples(v.micros[k]), v.micros[k].denominators, uo, v.old_logp[k]);
      }
      synchronize(device);
      const auto t1 = Clock::now();
      reduce_and_step(params, optimizer, *comm, 1.0, std::isfinite(total.loss));
      synchronize(device);
      if (step < a.warmup || profiled) continue;
      v.opt_s.push_back(seconds_since(t1));
      v.step_s.push_back(seconds_since(t0));
      const auto [faults1, system1] = faults_and_system_s();
      v.faults.push_back(faults1 - faults0);
      v.system_s.push_back(system1 - system0);
      v.fwd_s.push_back(total.forward_s);
      v.bwd_s.push_back(total.backward_s);
      peaks.push_back(measure_peak());
      v.mfu.push_back(flops / v.step_s.back() / 1e9 / std::max(peaks[peaks.size() - 2], peaks.back()));
    }
  }
  const std::vector<double>& step_s = variants.front().step_s;
  const double t = median(step_s);
  const double peak = *std::max_element(peaks.begin(), peaks.end());
  nlohmann::json out;
  out["workload"] = {{"sequences", specs.size()},
                     {"tokens", tokens},
                     {"max_len", max_len},
                     {"layout", a.layout},
                     {"micros", variants.front().micros.size()},
                     {"padded_micros", padded_micros}};
  out["model"] = {{"hidden", mc.hidden_size},    {"layers", mc.num_layers},     {"heads", mc.num_heads},
                  {"kv_heads", mc.num_kv_heads}, {"ffn", mc.intermediate_size}, {"vocab", mc.vocab_size},
                  {"matmul_params", n_params}};
  out["threads"] = torch::get_num_threads();
  out["save_logits_mib"] = a.save_logits_mib;
  out["fused_head"] = a.fused_head;
  parallel::TokenLogProbOptions chunking;
  chunking.chunk_tokens = lo.chunk_tokens;
  out["logits_chunk_tokens"] = parallel::logits_chunk_tokens(chunking, mc.vocab_size, 4);  // float32 logits
  out["blas"] = blas_description();
  out["host_memory"] = host_memory_description();
  out["steps"] = a.steps;
  out["share_prompt"] = a.share_prompt;
  out["attention"] = a.attention;
  out["recompute"] = a.recompute;
  out["lora_rank"] = a.lora_rank;
  out["trained_params"] = [&] {
    int64_t n = 0;
    for (const auto& p : params) n += p.numel();
    return n;
  }();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  out["peak_rss_gib"] = static_cast<double>(usage.ru_maxrss) / (1 << 20);  // ru_maxrss is in KiB
  out["device"] = device.str();
  out["dtype"] = a.dtype;
  if (device.is_cuda()) out["peak_gpu_gib"] = device_peak_bytes(device) / static_cast<double>(1 << 30);
  // The first variant's figures at the top level (as before); each variant's below.
  const auto figures = [&](const Variant& v) {
    const double vt = median(v.step_s);
    return nlohmann::json{{"share_prompts", v.share},
                          {"micros", v.micros.size()},
                          {"micro_tokens", v.micro_tokens},
                          {"step_s", vt},
                          {"fwd_s", median(v.fwd_s)},
                          {"bwd_s", median(v.bwd_s)},
                          {"opt_s", median(v.opt_s)},
                          {"page_faults_per_step", median(v.faults)},
                          {"system_s_per_step", median(v.system_s)},
                          {"tokens_per_s", static_cast<double>(tokens) / vt},  // the unshared batch's tokens
                          // Shared: the unshared batch's FLOPs over the time, so it may exceed 1.
                          {v.share ? "effective_mfu" : "mfu", median(v.mfu)}};
  };
  const Variant& first = variants.front();
  out["step_s"] = t;
  out["fwd_s"] = median(first.fwd_s);
  out["bwd_s"] = median(first.bwd_s);
  out["opt_s"] = median(first.opt_s);
  out["page_faults_per_step"] = median(first.faults);  // minor faults: fresh pages the kernel zero-filled
  out["system_s_per_step"] = median(first.system_s);
  out["tokens_per_s"] = static_cast<double>(tokens) / t;
  out["model_flops_per_step"] = flops;
  out["achieved_gflops"] = flops / t / 1e9;
  out["gemm2048_f32_gflops"] = peak;  // the best of every measurement
  out["gemm_peak"] = host_blas_peak ? "float32 2048^3 BLAS on the host"
                                    : a.dtype + (device.is_cuda() ? " 8192^3 on " : " 2048^3 on ") + device.str();
  out["gemm2048_f32_samples"] = peaks;  // before the first timed step, then after each
  out["mfu"] = median(first.mfu);       // each step against the higher peak beside it
  out["mfu_vs_best_peak"] = flops / t / 1e9 / peak;
  for (const Variant& v : variants) out[v.share ? "shared" : "unshared"] = figures(v);
  if (variants.size() == 2) {  // paired step by step: the two variants' steps alternate
    std::vector<double> ratios;
    for (size_t i = 0; i < variants[0].step_s.size(); ++i)
      ratios.push_back(variants[0].step_s[i] / variants[1].step_s[i]);
    out["share_speedup"] = median(ratios);
    out["share_speedup_per_step"] = ratios;
  }
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace tandem::app
