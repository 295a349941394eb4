// Subcommand entry points and their parsed arguments; main.cpp wires them to CLI11.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::app {

struct BenchScheduleArgs {
  std::string lengths_path;
  int64_t dp = 1;
  int64_t micro_batch_size = 0;
  int64_t max_tokens_per_micro = 0;
  int64_t group_size = 1;
  int64_t num_mini_batches = 1;
  bool keep_groups = false;
  std::string cost = "tokens";
  int64_t hidden_size = 4096;  // sets the workload model's attention coefficient
};
int run_bench_schedule(const BenchScheduleArgs& args);

// `tandem env NAME`: serves a built-in environment (calculator, guess, lookup) over the
// environment protocol on stdin / stdout until EOF.
int run_env(const std::string& name);

// Model dims and workload of `tandem bench rollout` (random-init model, one JSON object out).
struct BenchRolloutArgs {
  int64_t hidden_size = 256;
  int64_t layers = 4;
  int64_t heads = 8;
  int64_t kv_heads = 4;
  int64_t vocab = 4096;
  int64_t intermediate_size = 0;  // 0: ~8/3 hidden_size, rounded up to 64
  int64_t prompt_len = 32;
  int64_t max_new_tokens = 64;
  int64_t batch = 8;       // max_batch of the sampler
  int64_t max_live = 256;  // max_live of the sampler (shared prompts)
  int64_t requests = 32;
  double tail_sigma = 1.0;  // lognormal sigma of the long-tail response lengths
  int64_t threads = 0;      // 0: LibTorch's default
  uint64_t seed = 0;
  std::string dtype = "float32";
  std::string lengths_path;              // non-empty: only the shared-prompt workload of this file
  std::string share_prompt = "compare";  // with lengths_path: off | auto | compare
  int64_t repeats = 3;
  std::string profile_path;        // with lengths_path: a Chrome trace of one more run of the last variant
  int64_t lora_rank = 0;           // with lengths_path: > 0 times every variant with adapters off and on
  bool compare_packed = false;     // with lengths_path: also the adapter-free variants with packing off
  std::string attention = "auto";  // auto | fused | materialised
};
int run_bench_rollout(const BenchRolloutArgs& args);

struct BenchCommArgs {
  int64_t min_mib = 1;
  int64_t max_mib = 256;
  int64_t iters = 10;
};
int run_bench_comm(const BenchCommArgs& args, int rank, int world);

struct BenchStepArgs {
  std::string config_path = "configs/unified.yaml";
  std::vector<std::string> overrides;
  std::string track = "image";
  int64_t repeats = 3;
  int threads = 1;
  double memory_budget_mib = 0;  // --track shared: > 0 caps each track's per-micro peak memory
};
int run_bench_step(const BenchStepArgs& args, int argc, char** argv);

struct BenchTrainArgs {
  std::string lengths_path;
  int64_t hidden = 128, layers = 2, heads = 4, kv_heads = 0, ffn = 0, vocab = 16;  // 0: heads / ~8/3 hidden
  std::string layout = "packed";
  std::optional<int64_t> micro_batch_size, max_tokens_per_micro;  // neither: one micro of everything
  int threads = 0;                                                // 0: every CPU this process may use
  int64_t steps = 5, warmup = 2, seed = 0;
  int64_t save_logits_mib = 0;       // > 0: keep a micro's logits for the backward up to this size
  std::string profile_path;          // non-empty: a Chrome trace of the last timed step
  int64_t logits_chunk_tokens = 0;   // tokens per logits chunk; 0: the 128 MiB default
  bool fused_head = true;            // the loss fused into the lm head (no backward recompute)
  std::string share_prompt = "off";  // off | auto (prompts shared) | compare (both, steps alternating)
  std::string attention = "auto";    // auto | fused | materialised
  std::string recompute = "none";    // none | layers
  std::string device = "cpu";        // cpu | cuda (the first GPU)
  std::string dtype = "float32";     // float32 | bfloat16 (pure bf16 weights and AdamW state)
  int64_t lora_rank = 0;             // > 0: all-linear adapters of this rank train, the base frozen
};
int run_bench_train(const BenchTrainArgs& args, int argc, char** argv);

// `tandem bench ablate`: conditions (recipe overrides) of `tandem train`, each run a fresh
// mpirun process, ABBA order, speedups over condition B paired run by run.
struct BenchAblateArgs {
  std::string config_path;
  std::vector<std::string> overrides;   // --set KEY=VALUE, applied to every condition
  std::vector<std::string> conditions;  // --condition NAME=K1=V1;K2=V2 (may be empty: "B=")
  int64_t np = 2, runs = 2, steps = 20, warmup_steps = 5;
  std::string out;  // "": a fresh temporary directory, removed afterwards unless keep
  bool keep = false;
  std::string mpirun = "mpirun";
  double timeout_s = 1800;
};
int run_bench_ablate(const BenchAblateArgs& args);

struct TrainArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string resume;
};
int run_train(const TrainArgs& args, int argc, char** argv);

struct EvalArgs {
  std::string checkpoint;   // a checkpoint or run directory, or
  std::string model;        // a Hugging Face directory (exactly one of the two)
  std::string config_path;  // the recipe whose eval section runs (default with --checkpoint: its own)
  std::vector<std::string> overrides;
  std::string base;  // with --checkpoint of a LoRA run: its base model's directory now (use_lora_base)
};
int run_eval(const EvalArgs& args, int argc, char** argv);
int run_pretrain_flow(const TrainArgs& args, int argc, char** argv);

struct GenerateArgs {
  std::string checkpoint;  // a checkpoint or run directory, or
  std::string model;       // a Hugging Face Llama / Qwen2 directory (exactly one of the two)
  std::string base;        // with --checkpoint of a LoRA run: its base model's directory now
  std::string tokenizer;   // with --model: tokenizer.json or its directory ("": the model's own)
  std::vector<std::string> prompts;
  int64_t samples = 1;
  double temperature = -1;     // < 0: the recipe's
  int64_t max_new_tokens = 0;  // 0: the recipe's
  uint64_t seed = 0;
  std::string image_out;      // a unified-model checkpoint: also draw every prompt into this PNG grid
  std::string chat_template;  // auto | none | FILE ("": the recipe's, or auto with --model)
  std::optional<std::string> system_prompt;
};
int run_generate(const GenerateArgs& args);

int run_ckpt_info(const std::string& path);
// dtype: float32 | bfloat16 | float16 | float64, or "" for the run's compute dtype.
int run_ckpt_export_hf(const std::string& path, const std::string& out, const std::string& dtype, bool merge,
                       const std::string& base = "");

}  // namespace tandem::app
