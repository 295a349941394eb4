// tandem's entry point: CLI11 subcommands and the exit-code policy (bad input -> 2), nothing else.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "apps/commands.h"
#include "core/config/config.h"
#include "core/trainer/preflight.h"
#include "parallel/communicator.h"
#include "parallel/runtime.h"
#include "runtime/blas_kernel.h"
#include "runtime/host_memory.h"
#include "runtime/loaded_libraries.h"

namespace {

struct RecipeArgs {
  std::string config_path;
  std::vector<std::string> overrides;
};

void add_recipe_options(CLI::App* cmd, RecipeArgs& args) {
  cmd->add_option("--config,-c", args.config_path, "recipe YAML (default: the embedded quickstart recipe)");
  cmd->add_option("--set", args.overrides, "override a recipe key: --set tracks.ar.rollout.group_size=4")
      ->allow_extra_args(false)
      ->take_all();
}

// World size from the launcher's environment, so check-config under mpirun/srun checks the layout.
int64_t launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char* v = std::getenv(name)) return std::atoll(v);
  return 0;
}

// Floating CLI values must be finite (CLI11's Range lets NaN through: every comparison with it is false).
const CLI::Validator kFinite(
    [](std::string& text) {
      char* end = nullptr;
      const double x = std::strtod(text.c_str(), &end);
      return std::isfinite(x) ? std::string() : "must be a finite number, got " + text;
    },
    "FINITE");

// CLI numbers are range-checked as recipe keys are (core/config/config_schema.h): counts at least
// their recipe minimum, sizes at most 2^24 as config.json's dimensions, so an absurd value is a parse
// error naming the flag (exit 2), never an allocation that fails or an overflow. Seeds take any
// unsigned value.
const CLI::Range kSize(int64_t{1}, int64_t{1} << 24);
const CLI::Range kSizeOrZero(int64_t{0}, int64_t{1} << 24);
const CLI::Range kTokens(int64_t{1}, int64_t{1} << 30);
const CLI::Range kCount(int64_t{1}, int64_t{1} << 20);
const CLI::Range kCountOrZero(int64_t{0}, int64_t{1} << 20);
const CLI::Range kRanks(int64_t{1}, int64_t{1} << 20);
const CLI::Range kThreads(int64_t{1}, int64_t{4096});
const CLI::Range kThreadsOrZero(int64_t{0}, int64_t{4096});
const CLI::Range kMib(int64_t{1}, int64_t{1} << 20);
const CLI::Range kMibOrZero(int64_t{0}, int64_t{1} << 20);

// What this binary was built on and what it loaded: `tandem --version`. A library listed twice means two
// copies loaded (the wheel's and another), which the build is meant to rule out.
std::string version_text() {
  const auto paths = [](const std::string& prefix) {
    std::string out;
    for (const auto& p : tandem::loaded_libraries(prefix)) out += (out.empty() ? "" : ", ") + p;
    return out.empty() ? std::string("none loaded") : out;
  };
  std::ostringstream o;
  o << "tandem " << TANDEM_VERSION << "\n";
  o << "LibTorch " << TORCH_VERSION << " (" << (TANDEM_TORCH_CUDA ? "CUDA" : "CPU-only") << " build)\n";
  if (TANDEM_TORCH_CUDA)
    o << "CUDA: compiled in; runtime " << tandem::parallel::cuda_runtime_version() << " from " << paths("libcudart.so")
      << "\n";
  else
    o << "CUDA: not compiled in\n";
  if (tandem::parallel::nccl_available())
    o << "NCCL: compiled in; " << tandem::parallel::nccl_version() << " from " << paths("libnccl.so");
  else
    o << "NCCL: not compiled in";
  return o.str();
}

int run_check_config(const RecipeArgs& args, int64_t world_size) {
  tandem::Config config = tandem::load_config(args.config_path, args.overrides);
  if (world_size <= 0) world_size = launcher_world_size();
  if (world_size > 0) tandem::validate(config, world_size);
  for (const std::string& line : tandem::preflight(config)) std::cerr << "check-config: ok: " << line << "\n";
  std::cout << tandem::to_yaml(config);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tandem::keep_freed_host_memory();
  tandem::reproducible_blas();  // before MKL's first GEMM reads it
  // Logs go to stderr, so a command's stdout holds only its output (generate's text, check-config's
  // recipe, bench JSON). `train` replaces this logger with its own (console + train.log).
  spdlog::set_default_logger(spdlog::stderr_color_mt("tandem-cli"));
  CLI::App app{"tandem: native GRPO / FlowGRPO post-training engine"};
  app.set_version_flag("--version", version_text);
  app.require_subcommand(1);

  RecipeArgs check_args;
  int64_t check_world = 0;
  CLI::App* check = app.add_subcommand("check-config", "load, validate and print the fully resolved recipe");
  add_recipe_options(check, check_args);
  check->add_option("--world-size", check_world, "also check parallel.{dp,cp,tp} against this many ranks")
      ->check(kRanks);

  tandem::app::TrainArgs train_args;
  CLI::App* train = app.add_subcommand("train", "run GRPO / FlowGRPO training (launch with mpirun or srun)");
  train->add_option("--config,-c", train_args.config_path, "recipe YAML (default: the embedded quickstart recipe)");
  train->add_option("--set", train_args.overrides, "override a recipe key: --set run.steps=10")->take_all();
  train->add_option("--resume", train_args.resume, "auto (latest checkpoint of the run, if any) or a checkpoint dir");

  tandem::app::EvalArgs eval_args;
  CLI::App* eval = app.add_subcommand(
      "eval", "the recipe's held-out evaluation alone (mean reward, greedy pass@1, pass@k), under mpirun or not");
  eval->add_option("--checkpoint", eval_args.checkpoint, "checkpoint or run directory");
  eval->add_option("--model", eval_args.model, "Hugging Face model directory (instead of --checkpoint)");
  eval->add_option("--base", eval_args.base,
                   "LoRA checkpoints: the base model directory, when it is no longer where the run read it (checked "
                   "against the checkpoint's record of its weights)");
  eval->add_option("--config,-c", eval_args.config_path,
                   "recipe with the eval section (default with --checkpoint: the checkpoint's recipe)");
  eval->add_option("--set", eval_args.overrides, "override a recipe key: --set eval.samples_per_prompt=8")->take_all();

  tandem::app::TrainArgs pretrain_args;
  CLI::App* pretrain = app.add_subcommand("pretrain-flow", "rectified-flow pretraining of the image policy");
  pretrain->add_option("--config,-c", pretrain_args.config_path, "recipe YAML")->required();
  pretrain->add_option("--set", pretrain_args.overrides, "override a recipe key")->take_all();

  tandem::app::GenerateArgs gen_args;
  CLI::App* gen = app.add_subcommand(
      "generate",
      "sample text (and, from a unified model, images) from a trained policy or a Hugging Face Llama / Qwen2");
  gen->add_option("--checkpoint", gen_args.checkpoint, "checkpoint or run directory");
  gen->add_option("--base", gen_args.base,
                  "LoRA checkpoints: the base model directory, when it is no longer where the run read it (checked "
                  "against the checkpoint's record of its weights)");
  auto* gen_model =
      gen->add_option("--model", gen_args.model, "Hugging Face model directory (instead of --checkpoint)");
  gen->add_option("--tokenizer", gen_args.tokenizer, "tokenizer.json for --model (default: the model directory's)")
      ->needs(gen_model);
  gen->add_option("--prompt", gen_args.prompts, "prompt text (repeatable)")->required();
  gen->add_option("--samples", gen_args.samples, "samples per prompt")->check(CLI::Range(int64_t{1}, int64_t{4096}));
  gen->add_option("--temperature", gen_args.temperature, "sampling temperature, 0 = greedy (default: the recipe's)")
      ->check(kFinite & CLI::NonNegativeNumber);
  // The same range as tracks.ar.rollout.max_new_tokens' largest useful value (a context length).
  gen->add_option("--max-new-tokens", gen_args.max_new_tokens, "default: the recipe's")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  gen->add_option("--seed", gen_args.seed, "sampling seed");
  gen->add_option("--chat-template", gen_args.chat_template,
                  "auto (the tokenizer directory's chat_template.jinja or tokenizer_config.json), none (raw prompt "
                  "text) or a Jinja file (default: the "
                  "recipe's for --checkpoint, auto for --model)");
  gen->add_option("--system-prompt", gen_args.system_prompt,
                  "a system turn before each prompt (needs a chat template)");
  gen->add_option("--image-out", gen_args.image_out,
                  "unified-model checkpoints: also draw each prompt (a column per prompt, a row per sample) into "
                  "this PNG, with a .json of the prompts beside it");

  std::string ckpt_path, export_out, export_dtype, export_base;
  bool export_merge = false;
  CLI::App* ckpt = app.add_subcommand("ckpt", "inspect or export checkpoints");
  ckpt->require_subcommand(1);
  CLI::App* ckpt_info = ckpt->add_subcommand("info", "summarise a checkpoint (or a run's latest)");
  ckpt_info->add_option("path", ckpt_path, "checkpoint or run directory")->required();
  CLI::App* ckpt_export = ckpt->add_subcommand("export-hf", "copy the AR policy out as a Hugging Face directory");
  ckpt_export->add_option("path", ckpt_path, "checkpoint or run directory")->required();
  ckpt_export->add_option("out", export_out, "new output directory")->required();
  ckpt_export
      ->add_option("--dtype", export_dtype,
                   "weights dtype: float32, bfloat16, float16 or float64 (default: the run's compute dtype)")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16", "float64"}));
  ckpt_export->add_flag("--merge", export_merge,
                        "LoRA checkpoints: write the base with the adapters merged in, a complete Hugging Face "
                        "directory (default: the peft adapter directory)");
  ckpt_export->add_option("--base", export_base,
                          "LoRA checkpoints: the base model directory, when it is no longer where the run read it "
                          "(checked against the checkpoint's record of its weights)");

  std::string env_name;
  CLI::App* env = app.add_subcommand(
      "env", "serve a built-in environment over the environment protocol on stdin / stdout (docs/env_protocol.md)");
  env->add_option("name", env_name, "calculator, guess or lookup")
      ->required()
      ->check(CLI::IsMember({"calculator", "guess", "lookup"}));

  CLI::App* bench = app.add_subcommand("bench", "benchmarks that print JSON figures");
  bench->require_subcommand(1);
  tandem::app::BenchScheduleArgs sched;
  CLI::App* bench_schedule = bench->add_subcommand("schedule", "schedule a file of sequence lengths");
  bench_schedule->add_option("--lengths", sched.lengths_path, "file with one sequence length per line")->required();
  bench_schedule->add_option("--dp", sched.dp, "data-parallel ranks")->required()->check(kRanks);
  auto* mbs = bench_schedule->add_option("--micro-batch-size", sched.micro_batch_size, "rows per micro")->check(kSize);
  auto* budget =
      bench_schedule->add_option("--max-tokens-per-micro", sched.max_tokens_per_micro, "token budget")->check(kTokens);
  mbs->excludes(budget);
  bench_schedule->add_option("--group-size", sched.group_size, "consecutive lines per group")->check(kCount);
  bench_schedule->add_option("--num-mini-batches", sched.num_mini_batches, "mini-batches per rollout")->check(kCount);
  bench_schedule->add_flag("--keep-groups", sched.keep_groups, "never split a group across dp ranks");
  bench_schedule->add_option("--cost", sched.cost, "cost model")->check(CLI::IsMember({"tokens", "workload"}));
  bench_schedule->add_option("--hidden-size", sched.hidden_size, "hidden size for the workload cost model")
      ->check(kSize);

  tandem::app::BenchRolloutArgs roll;
  CLI::App* bench_rollout =
      bench->add_subcommand("rollout", "sampler tokens/s: KV cache vs recompute, continuous vs static batching");
  bench_rollout->add_option("--hidden-size", roll.hidden_size, "model hidden size")->check(kSize);
  bench_rollout->add_option("--layers", roll.layers, "decoder layers")->check(kSize);
  bench_rollout->add_option("--heads", roll.heads, "attention heads")->check(kSize);
  bench_rollout->add_option("--kv-heads", roll.kv_heads, "kv heads (GQA)")->check(kSize);
  bench_rollout->add_option("--vocab", roll.vocab, "vocabulary size")->check(kSize);
  bench_rollout->add_option("--intermediate-size", roll.intermediate_size, "MLP size (0: ~8/3 hidden)")
      ->check(kSizeOrZero);
  bench_rollout->add_option("--prompt-len", roll.prompt_len, "prompt tokens per request")->check(kSize);
  bench_rollout->add_option("--max-new-tokens", roll.max_new_tokens, "response tokens (the long tail's cap)")
      ->check(kSize);
  bench_rollout
      ->add_option("--batch", roll.batch,
                   "the sampler's max_batch: KV memory for this many unshared sequences, and the most "
                   "decoded together without sharing")
      ->check(kSize);
  bench_rollout
      ->add_option("--max-live", roll.max_live,
                   "the sampler's max_live: with shared prompts, the most sequences decoded together in "
                   "that memory")
      ->check(kSize);
  bench_rollout->add_option("--requests", roll.requests, "requests per run")->check(kCount);
  bench_rollout->add_option("--tail-sigma", roll.tail_sigma, "lognormal sigma of the long-tail lengths")
      ->check(kFinite & CLI::Range(0.0, 16.0));
  bench_rollout->add_option("--threads", roll.threads, "LibTorch intra-op threads (0: default)")->check(kThreadsOrZero);
  bench_rollout->add_option("--seed", roll.seed, "model, prompt and sampling seed");
  bench_rollout->add_option("--lengths", roll.lengths_path,
                            "workload file of lines 'group prompt_len response_len': time only it, with "
                            "--share-prompt (random prompts, each response exactly its length)");
  bench_rollout
      ->add_option("--share-prompt", roll.share_prompt,
                   "with --lengths: off, auto (a group's prompt prefilled once) or compare (both, alternating)")
      ->check(CLI::IsMember({"off", "auto", "compare"}));
  bench_rollout->add_option("--repeats", roll.repeats, "with --lengths: timed runs per variant (median)")
      ->check(kCount);
  bench_rollout->add_option("--profile", roll.profile_path,
                            "with --lengths: one more run of the last variant under the LibTorch profiler, its trace "
                            "written here (Chrome JSON)");
  bench_rollout
      ->add_option("--lora-rank", roll.lora_rank,
                   "with --lengths: rank-R all-linear adapters (alpha 2R, B drawn non-zero), each variant timed with "
                   "them off, on, and on through ATen's GEMMs instead of the host decode kernel (on an AMX host also "
                   "on with its AVX-512 kernel in place of AMX's), alternating (0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  bench_rollout->add_flag("--compare-packed", roll.compare_packed,
                          "with --lengths: each variant without adapters also timed with the sampler's packed bf16 "
                          "weights off (ATen's linear), alternating (parallel/packed_weights.h)");
  bench_rollout
      ->add_option("--attention", roll.attention,
                   "auto (fused but for float64), fused or materialised: the prefill's and decode steps' attention")
      ->check(CLI::IsMember({"auto", "fused", "materialised"}));
  bench_rollout->add_option("--dtype", roll.dtype, "float32, float64 or bfloat16")
      ->check(CLI::IsMember({"float32", "float64", "bfloat16"}));

  tandem::app::BenchCommArgs comm_args;
  CLI::App* bench_comm =
      bench->add_subcommand("comm", "all-reduce bandwidth, tensor path vs raw MPI (run under mpirun)");
  bench_comm->add_option("--min-mib", comm_args.min_mib, "smallest buffer (MiB)")->check(kMib);
  bench_comm->add_option("--max-mib", comm_args.max_mib, "largest buffer (MiB), sizes step by 4x")->check(kMib);
  bench_comm->add_option("--iters", comm_args.iters, "iterations at 16 MiB (scaled by size)")->check(kCount);

  tandem::app::BenchStepArgs step_args;
  CLI::App* bench_step = bench->add_subcommand(
      "step", "a track's training throughput at micro sizes 1, 2, 4, 8 (shared: both tracks on one unified model)");
  bench_step->add_option("--track", step_args.track, "ar, image or shared")
      ->check(CLI::IsMember({"ar", "image", "shared"}));
  bench_step
      ->add_option("--memory-budget-mib", step_args.memory_budget_mib,
                   "shared: the most peak tensor memory one micro of either track may take (sizes above it "
                   "are not eligible)")
      ->check(kFinite & CLI::Range(1e-3, 1e9));
  bench_step->add_option("--config,-c", step_args.config_path, "recipe (default configs/unified.yaml)");
  bench_step->add_option("--set", step_args.overrides, "override a recipe key")->take_all();
  bench_step->add_option("--repeats", step_args.repeats, "timed repeats per size (median)")->check(kCount);
  bench_step->add_option("--threads", step_args.threads, "intra-op threads")->check(kThreads);

  tandem::app::BenchTrainArgs train_bench;
  CLI::App* bench_train = bench->add_subcommand(
      "train", "one GRPO training step on a stated workload: tokens/s, fwd/bwd/opt split, FLOPs, MFU");
  bench_train
      ->add_option("--lengths", train_bench.lengths_path,
                   "file with one sequence length per line, or lines 'group prompt_len response_len'")
      ->required();
  bench_train->add_option("--hidden", train_bench.hidden, "hidden size")->check(kSize);
  bench_train->add_option("--layers", train_bench.layers, "decoder layers")->check(kSize);
  bench_train->add_option("--heads", train_bench.heads, "attention heads")->check(kSize);
  bench_train->add_option("--kv-heads", train_bench.kv_heads, "kv heads (default: --heads)")->check(kSize);
  bench_train->add_option("--ffn", train_bench.ffn, "MLP intermediate size (default ~8/3 hidden)")->check(kSize);
  bench_train->add_option("--vocab", train_bench.vocab, "vocabulary size")->check(kSize);
  bench_train->add_option("--layout", train_bench.layout, "packed, padded or auto")
      ->check(CLI::IsMember({"packed", "padded", "auto"}));
  auto* train_mbs =
      bench_train->add_option("--micro-batch-size", train_bench.micro_batch_size, "rows per micro")->check(kSize);
  bench_train->add_option("--max-tokens-per-micro", train_bench.max_tokens_per_micro, "token budget per micro")
      ->excludes(train_mbs)
      ->check(kTokens);
  bench_train
      ->add_option("--threads", train_bench.threads, "intra-op threads (default: every CPU this process may use)")
      ->check(kThreads);
  bench_train->add_option("--steps", train_bench.steps, "timed steps (median)")->check(kCount);
  bench_train->add_option("--warmup", train_bench.warmup, "untimed steps first")->check(kCountOrZero);
  bench_train->add_option("--seed", train_bench.seed, "weights and tokens seed")->check(CLI::NonNegativeNumber);
  bench_train
      ->add_option("--save-logits-mib", train_bench.save_logits_mib,
                   "keep a micro's logits for the backward when they fit in this many MiB (0: recompute)")
      ->check(kMibOrZero);
  bench_train
      ->add_option("--logits-chunk-tokens", train_bench.logits_chunk_tokens,
                   "tokens per chunk of the log-prob's logits (0: as many as fit in 128 MiB)")
      ->check(kSizeOrZero);
  bench_train->add_flag("--fused-head,!--no-fused-head", train_bench.fused_head,
                        "fuse the loss into the lm head (default) or recompute the logits in the backward");
  bench_train
      ->add_option("--share-prompt", train_bench.share_prompt,
                   "off, auto (a group's prompt is computed once) or compare (both, steps alternating)")
      ->check(CLI::IsMember({"off", "auto", "compare"}));
  bench_train
      ->add_option("--attention", train_bench.attention,
                   "auto (fused kernels), fused or materialised (the (L, L) scores held: the reference)")
      ->check(CLI::IsMember({"auto", "fused", "materialised"}));
  bench_train
      ->add_option("--recompute", train_bench.recompute,
                   "none or layers (each decoder layer's activations recomputed in the backward)")
      ->check(CLI::IsMember({"none", "layers"}));
  bench_train->add_option("--device", train_bench.device, "cpu or cuda (the first visible GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  bench_train
      ->add_option("--dtype", train_bench.dtype,
                   "float32 or bfloat16 (pure bf16 weights and optimizer state; MFU against a bf16 GEMM peak)")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  bench_train
      ->add_option("--lora-rank", train_bench.lora_rank,
                   "rank-R all-linear adapters (alpha 2R) on a frozen base: only they train (0: full fine-tuning)")
      ->check(CLI::Range(int64_t{0}, int64_t{4096}));
  bench_train->add_option(
      "--profile", train_bench.profile_path,
      "after the timed steps, run one more under the LibTorch profiler and write its trace here (Chrome JSON)");

  tandem::app::BenchAblateArgs ablate;
  CLI::App* bench_ablate =
      bench->add_subcommand("ablate",
                            "tokens/s of named conditions of `tandem train`, fresh mpirun processes in ABBA order, "
                            "speedups over condition B paired run by run");
  bench_ablate->add_option("--config,-c", ablate.config_path, "recipe every condition runs")->required();
  bench_ablate->add_option("--set", ablate.overrides, "override a recipe key in every condition")->take_all();
  bench_ablate
      ->add_option("--condition", ablate.conditions,
                   "NAME=KEY=VALUE;KEY=VALUE... (repeatable; may be empty: B=); B is the baseline")
      ->take_all()
      ->required();
  bench_ablate->add_option("--np", ablate.np, "ranks per run")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  bench_ablate->add_option("--runs", ablate.runs, "runs per condition (>= 2 for a speedup)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  bench_ablate->add_option("--steps", ablate.steps, "measured steps per run")->capture_default_str()->check(kCount);
  bench_ablate->add_option("--warmup-steps", ablate.warmup_steps, "steps run first and not measured")
      ->capture_default_str()
      ->check(kCountOrZero);
  bench_ablate->add_option("--out", ablate.out, "run directory (default: a fresh temporary one, removed after)");
  bench_ablate->add_flag("--keep", ablate.keep, "keep the temporary run directory");
  bench_ablate->add_option("--mpirun", ablate.mpirun, "launcher (Open MPI's mpirun)")->capture_default_str();
  bench_ablate->add_option("--timeout-s", ablate.timeout_s, "seconds one run may take before it is killed")
      ->capture_default_str()
      ->check(kFinite & CLI::Range(1e-3, 1e7));
  bench_ablate->footer(
      "Each run is `mpirun -np N tandem train --config FILE --set run.steps=W+S ...` (--set, then the\n"
      "condition's overrides), stdout/stderr in OUT/<cond>_<i>.log. Round 1 runs the conditions in the\n"
      "given order, round 2 reversed, and so on (ABBA); run i of a condition pairs with run i of B.\n"
      "tokens/s of a run = trained tokens (ar/train/action_tokens; image/rollout/samples without an AR\n"
      "track: see `unit`) over time/step_s, summed over steps W+1..W+S. speedup_vs_B = geomean of the\n"
      "paired ratios, only with >= 2 runs (null and speedup_refused otherwise).\n"
      "measurement_scope: first_step (S = 1, W = 0: start-up effects included), steady_state (W >= 1\n"
      "and >= 2 runs), includes_warmup (W = 0, S > 1: the first steps are in the figure), single_run\n"
      "(W >= 1 but one run: no pairing, no speedup).");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    if (*check) return run_check_config(check_args, check_world);
    if (*train) return tandem::app::run_train(train_args, argc, argv);
    if (*eval) return tandem::app::run_eval(eval_args, argc, argv);
    if (*pretrain) return tandem::app::run_pretrain_flow(pretrain_args, argc, argv);
    if (*gen) return tandem::app::run_generate(gen_args);
    if (*env) return tandem::app::run_env(env_name);
    if (*ckpt_info) return tandem::app::run_ckpt_info(ckpt_path);
    if (*ckpt_export)
      return tandem::app::run_ckpt_export_hf(ckpt_path, export_out, export_dtype, export_merge, export_base);
    if (*bench_step) return tandem::app::run_bench_step(step_args, argc, argv);
    if (*bench_train) return tandem::app::run_bench_train(train_bench, argc, argv);
    if (*bench_ablate) return tandem::app::run_bench_ablate(ablate);
    if (*bench_schedule) return tandem::app::run_bench_schedule(sched);
    if (*bench_rollout) return tandem::app::run_bench_rollout(roll);
    if (*bench_comm) {
      tandem::parallel::MpiRuntime mpi(&argc, &argv);
      return tandem::app::run_bench_comm(comm_args, mpi.rank(), mpi.size());
    }
  } catch (const tandem::UserError& e) {
    std::cerr << "tandem: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tandem: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
