// The recipe: nested plain structs with defaults (DESIGN section 7), loaded from YAML with
// --set overrides and validated in one place (config.cpp). Nothing else parses the recipe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "core/config/enums.h"

namespace tandem {

struct RunConfig {
  std::string name = "tandem";
  std::string out_dir = "runs";
  int64_t seed = 1;
  int64_t steps = 100;
  int64_t log_every = 1;
  // Every log_every steps, samples/step_N.jsonl holds this many of the step's groups as text
  // (prompt, response, reward, advantage, length). 0: none.
  int64_t sample_groups = 2;
  int64_t save_every = 50;  // 0: save only at the end
  int64_t keep_last = 3;    // 0: keep every checkpoint
  DType dtype = DType::kFloat32;
  Device device = Device::kAuto;
  int64_t threads = 0;  // intra-op (and BLAS) threads per rank; 0: the rank's share of its CPUs
};

struct ParallelConfig {
  int64_t dp = -1;  // -1: world_size / (cp * tp)
  int64_t cp = 1;
  int64_t tp = 1;
  Backend backend = Backend::kAuto;
  double timeout_s = 300.0;
  // > 0: the last rollout_ranks world ranks only generate (AR track) and the rest, laid out as
  // {dp, cp, tp}, only train; samples and weights cross between them every step.
  int64_t rollout_ranks = 0;
};

struct OptimConfig {
  double lr = 1e-4;
  double weight_decay = 0.0;
  std::vector<double> betas{0.9, 0.999};
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0: no clipping
  int64_t warmup_steps = 0;
  LrSchedule schedule = LrSchedule::kConstant;
  OptimMoments moments = OptimMoments::kFloat32;  // 8bit: about 2 bytes a parameter instead of 8
};

// Shared micro-batch geometry; every track may override each field (null = use this).
// A micro is bounded by max_tokens_per_micro when that is set, else by micro_batch_size rows.
struct TrainConfig {
  int64_t num_mini_batches = 1;
  std::optional<int64_t> micro_batch_size = 4;
  std::optional<int64_t> max_tokens_per_micro;
  LossAggMode loss_agg_mode = LossAggMode::kTokenMean;
  // AR track: old / reference log-probs of each finished mini-batch's groups run on a second
  // thread while the sampler produces the next mini-batch's groups (same numbers as false).
  bool overlap = false;
  // The AR track's Llama-family decoder: its attention kernel (auto: fused, but float64 runs the
  // materialised reference) and activation recompute (layers: each decoder layer's activations
  // are recomputed in the backward; a micro holds the layer inputs plus one layer's).
  AttentionImpl attention = AttentionImpl::kAuto;
  Recompute recompute = Recompute::kNone;
};

struct RewardConfig {
  std::string kind;
  std::optional<std::string> command;
  double timeout_s = 30.0;
};

struct RopeScalingConfig {
  RopeType type = RopeType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;      // llama3
  double high_freq_factor = 4.0;     // llama3
  int64_t original_max_seq_len = 0;  // llama3: HF's original_max_position_embeddings
};

// With hf_dir (a Hugging Face Llama / Qwen2 directory) config.json is the source of truth: every
// architecture key below is filled from it when the recipe loads (resolve_model_dir), a key the
// recipe gives must agree with it, and max_seq_len may only lower the model's context. Without
// hf_dir the keys describe a fresh randomly initialised model.
struct ArModelConfig {
  std::optional<std::string> hf_dir;  // llama: a Hugging Face directory; unified: a save_unified one
  // llama: a decoder-only LM; unified: the shared text + image transformer (models/unified), its
  // image side sized by tracks.image.model, which draws with it under tracks.image.model.arch shared.
  ArArch arch = ArArch::kLlama;
  int64_t vocab_size = 64;
  int64_t hidden_size = 64;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t intermediate_size = 128;
  int64_t max_seq_len = 64;
  double rope_theta = 10000.0;
  double rms_eps = 1e-6;
  bool tie_embeddings = false;
  bool qkv_bias = false;
  bool qk_norm = false;             // per-head RMSNorm of queries and keys (Qwen3)
  std::optional<int64_t> head_dim;  // null: hidden_size / num_heads
  // Mistral: every layer's query sees the last sliding_window positions (itself included); null: all.
  std::optional<int64_t> sliding_window;
  // Gemma 3: the layers without the window (its full_attention layers; empty: every layer has it),
  // and the RoPE base of the windowed ones (null: rope_theta and rope_scaling, as the others).
  std::vector<int64_t> full_attention_layers;
  std::optional<double> rope_local_theta;
  // llama: x + attn(norm(x)), + mlp(norm(x)), SwiGLU; gemma3: norms before and after attention and
  // MLP scaled by (1 + w), GeGLU (tanh GELU), embeddings times sqrt(hidden_size).
  ArBlock block = ArBlock::kLlama;
  std::optional<double> query_pre_attn_scalar;  // Gemma 3: scores are q.k / sqrt(this); null: head_dim
  RopeScalingConfig rope_scaling;
  std::optional<int64_t> bos_token_id;  // the model's own (config.json / generation_config.json)
  std::vector<int64_t> eos_token_ids;   // every id that ends a response (config + generation_config)
};

struct TokenizerConfig {
  TokenizerKind kind = TokenizerKind::kChar;
  std::optional<std::string> path;
  std::string alphabet = "0123456789+-*=:;,.<>|# abcdefghijklmnopqrstuvwxyz";
};

struct ArDataConfig {
  std::string task = "reverse_digits";
  std::optional<std::string> path;
  std::string prompt_key = "prompt";
  std::string answer_key = "answer";
  bool shuffle = true;
  // Digit counts of the built-in synthetic tasks (null: the task's default range).
  std::optional<int64_t> min_digits;
  std::optional<int64_t> max_digits;
  // auto: the tokenizer's chat template (chat_template.jinja, else tokenizer_config.json's, beside
  // tokenizer.json) when it has one, raw prompt text otherwise; none: raw text; anything else: a
  // Jinja template file.
  std::string chat_template = "auto";
  std::optional<std::string> system_prompt;  // a system turn before each prompt (needs a template)
  // Extra variables for the chat template, as transformers' apply_chat_template(**kwargs) takes
  // them (Qwen3's enable_thinking: false). Values are scalars, kept as JSON text ("false", "3",
  // "\"text\"").
  std::map<std::string, std::string> chat_template_kwargs;
};

struct ArRolloutConfig {
  int64_t prompts_per_step = 8;
  int64_t group_size = 8;
  int64_t max_new_tokens = 16;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;  // 0: off
  std::vector<std::string> stop;
  // The sampler's KV cache holds max_batch unshared sequences (the longest prompt + max_new_tokens
  // each); with share_prompt on, that memory decodes up to max_live sequences together
  // (models::kv_plan). Speed and memory only: a sample does not depend on its batch.
  int64_t max_batch = 64;
  int64_t max_live = 256;
  bool dump = false;
  std::optional<std::string> replay_dir;
  // With parallel.rollout_ranks > 0: how many policy versions a sample may lag the weights it
  // trains (0: rollout waits for every update, the colocated numbers). Older samples are dropped.
  int64_t max_staleness = 0;
};

struct ArKlConfig {
  double coef = 0.0;
  KlEstimator estimator = KlEstimator::kK3;
};

struct ArAlgoConfig {
  bool norm_by_std = true;
  double adv_eps = 1e-6;
  std::optional<double> adv_clip;
  double clip_low = 0.2;
  double clip_high = 0.2;
  std::optional<double> clip_c = 3.0;  // dual clip; null: off
  RatioKind ratio = RatioKind::kToken;
  ArKlConfig kl;
  double entropy_coef = 0.0;
  OldLogp old_logp = OldLogp::kRecompute;
  bool filter_zero_variance_groups = false;
  std::optional<int64_t> loss_norm_len;  // null: rollout.max_new_tokens
  // Truncated importance sampling: each token's policy loss is scaled by
  // min(exp(old_logp - rollout_logp), tis_cap), correcting for a behaviour (rollout) policy that
  // is not the old policy (stale weights). null: off.
  std::optional<double> tis_cap;
};

// Supervised warm-start on the task's reference answers before RL (off by default). Built-in
// synthetic tasks cannot be learned by RL from a random init in minutes: this gives the policy
// the answer format so GRPO has a reward signal to climb. Runs once, on a fresh start only.
struct ArWarmstartConfig {
  int64_t steps = 0;
  double lr = 1e-3;
  // The warm-start's own learning-rate schedule over its steps (core/grpo/lr_schedule.h), as
  // optim's is over run.steps. A long supervised warm-start at a constant rate plateaus noisily
  // (and can diverge late); a decay lets it settle.
  int64_t warmup_steps = 0;
  LrSchedule schedule = LrSchedule::kConstant;
  int64_t batch_size = 32;  // sequences per step, over all dp ranks
  // With tracks.ar.env: the demonstrated conversations (JSON lines, {"messages": [...]}) whose
  // model turns the warm-start trains on (core/env/demonstrations.h). Required there.
  std::optional<std::string> demos;
};

// LoRA (tracks.ar.lora, tracks.image.lora): low-rank adapters on the policy's linear layers,
// trained on a frozen base; the KL reference is the base with the adapters off. rank 0: off (full
// fine-tuning).
struct LoraConfig {
  int64_t rank = 0;
  double alpha = 16;  // the adapters' output scales by alpha / rank (peft's lora_alpha)
  // all-linear, or a list of layer names. The Llama: q/k/v/o_proj, gate/up/down_proj in every
  // layer (peft's all-linear). The DiT: qkv, proj, mlp_fc1, mlp_fc2 in every block.
  std::vector<std::string> targets{"all-linear"};
  double dropout = 0;
  bool enabled() const { return rank > 0; }
};

// Multi-turn episodes (tracks.ar.env, docs/env_protocol.md): each sample is an episode in which
// the policy talks to an environment over several turns; the environment's step rewards replace
// tracks.ar.reward. name none: off (one response per prompt).
struct ArEnvConfig {
  std::string name = "none";               // none | calculator | guess | lookup | command
  std::optional<std::string> command;      // name command: the process to run (one per rank)
  double timeout_s = 60.0;                 // the longest the environment may leave requests unanswered
  int64_t max_turns = 0;                   // model turns per episode; 0: the environment's own (its hello)
  std::optional<int64_t> max_turn_tokens;  // sampled tokens per turn; null: rollout.max_new_tokens
  std::optional<int64_t> max_tokens;       // an episode's whole sequence; null: model.max_seq_len
  // A step whose failed episodes (environment errors, templates that rewrite history) exceed this
  // fraction of its episodes stops the run; below it, failed episodes are left out of training.
  double max_failed_fraction = 0.5;
  // Episodes holding a KV cache slot at once, live or waiting for the environment.
  int64_t slots = 64;
  // episode: one training sample per episode; turn: one per model turn (its context the episode
  // up to the turn, loss mask 1 on that turn's tokens only), sharing the episode's group and
  // advantage. With loss_agg_mode token-mean, ratio token and one mini-batch both train the same
  // tokens with the same weights; the seq-mean modes then weigh each turn as a sequence.
  EnvSamples samples = EnvSamples::kEpisode;
  bool enabled() const { return name != "none"; }
};

struct ArTrackConfig {
  bool enabled = true;
  double weight = 1.0;
  std::optional<int64_t> micro_batch_size;
  std::optional<int64_t> max_tokens_per_micro;
  std::optional<LossAggMode> loss_agg_mode;
  // packed THD or padded (B, T) micros; auto lets the schedule pick per micro (same numerics).
  BatchLayout layout = BatchLayout::kAuto;
  // auto: a group's prompt is computed once, in the sampler's prefill and in packed training
  // micros, wherever that applies (a Llama policy; training with cp 1); off: once per sample.
  SharePrompt share_prompt = SharePrompt::kAuto;
  ArModelConfig model;
  TokenizerConfig tokenizer;
  ArDataConfig data;
  RewardConfig reward{"exact_match", std::nullopt, 30.0};
  ArRolloutConfig rollout;
  ArAlgoConfig algo;
  ArWarmstartConfig warmstart;
  LoraConfig lora;
  ArEnvConfig env;
};

struct ImageModelConfig {
  // dit: the track's own class-conditional DiT; shared: the AR track's unified model, prompted with
  // the text "draw <class>" (then hidden_size, num_layers, num_heads must equal tracks.ar.model's).
  ImageArch arch = ImageArch::kDit;
  int64_t image_size = 16;
  int64_t channels = 3;
  int64_t patch_size = 4;
  int64_t hidden_size = 64;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t num_classes = 4;
};

struct ImageDataConfig {
  std::string task = "shapes";
};

struct SamplerConfig {
  int64_t steps = 10;
  int64_t eval_steps = 20;
  double noise_level = 0.7;
  double shift = 3.0;
  double cfg = 1.0;  // 1: no classifier-free guidance
  double timestep_fraction = 0.6;
};

struct ImageRolloutConfig {
  int64_t prompts_per_step = 4;
  int64_t group_size = 8;
  bool dump = false;
  std::optional<std::string> replay_dir;
};

struct ImageKlConfig {
  double coef = 0.0;
};

struct ImageAlgoConfig {
  double clip_range = 1e-4;
  double adv_clip_max = 5.0;
  ImageKlConfig kl;
  OldLogp old_logp = OldLogp::kRecompute;
  // With sampler.cfg != 1 the trained velocity is v_u + cfg (v_c - v_u). full: the gradient of
  // that (the unconditional pass gets (1 - cfg) of it), as the FlowGRPO reference trains;
  // cond_only: v_u is a constant (detached), only the conditional pass is trained.
  CfgGrad cfg_grad = CfgGrad::kFull;
};

// Rectified-flow pretraining of the image policy on the built-in dataset, so FlowGRPO starts
// from a model that already draws the classes. `path`: where the pretrained weights live; when
// it already holds them they are loaded, else `steps` of pretraining run (on a fresh start) and
// are saved there. `tandem pretrain-flow` runs only this phase.
struct ImagePretrainConfig {
  int64_t steps = 0;
  double lr = 1e-3;
  int64_t batch_size = 64;
  double label_dropout = 0.1;  // share of null-class labels, for classifier-free guidance
  std::optional<std::string> path;
};

struct ImageTrackConfig {
  bool enabled = false;
  double weight = 1.0;
  std::optional<int64_t> micro_batch_size;
  std::optional<int64_t> max_tokens_per_micro;
  std::optional<LossAggMode> loss_agg_mode;
  ImageModelConfig model;
  ImageDataConfig data;
  RewardConfig reward{"jpeg_compressibility", std::nullopt, 30.0};
  SamplerConfig sampler;
  ImageRolloutConfig rollout;
  ImageAlgoConfig algo;
  ImagePretrainConfig pretrain;
  LoraConfig lora;
};

struct TracksConfig {
  ArTrackConfig ar;
  ImageTrackConfig image;
};

// Held-out evaluation (off with every: 0 and at_start: false). The AR track samples
// samples_per_prompt responses of each of the first max_prompts prompts of `data` (in file order;
// a synthetic task draws its own held-out stream) at `temperature`, plus one greedy response, and
// reports the mean reward, the greedy pass@1 and the unbiased pass@k for k = 1..samples_per_prompt,
// a sample being correct when its reward is >= correct_at. The image track draws
// image_samples_per_class images of each class from fixed noise (Euler ODE, sampler.eval_steps) and
// reports their mean reward and a grid. The same prompts and seeds at every evaluation.
struct EvalImageConfig {
  int64_t samples_per_class = 4;
};

struct EvalConfig {
  int64_t every = 0;      // 0: never during training
  bool at_start = false;  // also before the first step of a fresh run
  int64_t samples_per_prompt = 4;
  double temperature = 1.0;
  std::optional<int64_t> max_new_tokens;  // null: tracks.ar.rollout.max_new_tokens
  std::optional<int64_t> max_prompts;     // null: every prompt of a dataset, 64 of a synthetic task
  double correct_at = 1.0;
  ArDataConfig data;  // the held-out prompts: the same keys as tracks.ar.data
  EvalImageConfig image;
  bool enabled() const { return every > 0 || at_start; }
};

struct Config {
  RunConfig run;
  ParallelConfig parallel;
  OptimConfig optim;
  TrainConfig train;
  TracksConfig tracks;
  EvalConfig eval;
};

// A track's micro geometry after per-track overrides fall back to train.*.
struct MicroGeometry {
  std::optional<int64_t> micro_batch_size;
  std::optional<int64_t> max_tokens_per_micro;  // set: token-budget micros
  LossAggMode loss_agg_mode;
};
MicroGeometry resolve_geometry(const TrainConfig& train, const std::optional<int64_t>& mbs,
                               const std::optional<int64_t>& budget, const std::optional<LossAggMode>& mode);

// Tokens one image sample costs in a token budget (its patch count).
int64_t image_tokens_per_sample(const ImageModelConfig& model);

// Loads `path` (or the embedded quickstart recipe when path is empty), applies `overrides`
// ("a.b.c=value", the value parsed as YAML and converted to the key's type), resolves the model
// directory (tracks.ar.model.hf_dir: config.json fills the architecture keys, see ArModelConfig)
// and validates. Throws UserError with a one-line message naming the key path; a file with no
// keys at all (empty, only comments) is a UserError naming the file, not a request for the defaults.
// `resolve_model_dir` false: the model section will come from elsewhere (a checkpoint's saved
// recipe, `eval --checkpoint --config`), so its hf_dir is not read and need not exist here.
Config load_config(const std::string& path, const std::vector<std::string>& overrides, bool resolve_model_dir = true);
Config load_config_from_string(const std::string& yaml_text, const std::string& source_name,
                               const std::vector<std::string>& overrides);

// A recipe a run saved (recipe.yaml of a run or checkpoint): already resolved, so the model
// directory it names is not opened again (it may be gone; the checkpoint holds the weights).
// `overrides` (--set KEY=VALUE) apply on top, as load_config's do.
Config load_saved_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Cross-field rules; world_size > 0 also checks the parallel layout against it.
void validate(const Config& config, int64_t world_size = 0);

// The fully resolved recipe as YAML (every default filled in); loads back to the same Config.
std::string to_yaml(const Config& config);

// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

// "unknown <what> '<name>'; expected one of a|b|c", plus " (did you mean b?)" when a name is within
// edit distance 2: the message of every built-in name table.
std::string unknown_name_message(const std::string& what, const std::string& name,
                                 const std::vector<std::string>& names);

}  // namespace tandem
