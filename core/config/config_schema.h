// The recipe schema: one visit() per struct lists its keys with their allowed ranges. The
// loader, the dumper and the key-suggestion logic all walk these, so a key is declared once.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/name_tables.h"  // the task names, registered by tasks/

namespace tandem::schema {

// Allowed range of a number; `why` is appended to the error message when set.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;
  const char* why = nullptr;
};
inline Range any() { return {}; }
inline Range at_least(double lo, const char* why = nullptr) { return {lo, Range{}.hi, false, false, why}; }
inline Range above(double lo, const char* why = nullptr) { return {lo, Range{}.hi, true, false, why}; }
inline Range closed(double lo, double hi) { return {lo, hi, false, false, nullptr}; }
inline Range open(double lo, double hi) { return {lo, hi, true, true, nullptr}; }
inline Range half_open(double lo, double hi) { return {lo, hi, false, true, nullptr}; }    // [lo, hi)
inline Range open_closed(double lo, double hi) { return {lo, hi, true, false, nullptr}; }  // (lo, hi]

template <class V>
void visit(V& v, RunConfig& c) {
  v.field("name", c.name);
  v.field("out_dir", c.out_dir);
  v.field("seed", c.seed, at_least(0));
  v.field("steps", c.steps, at_least(1));
  v.field("log_every", c.log_every, at_least(1));
  v.field("sample_groups", c.sample_groups, closed(0, 64));
  v.field("save_every", c.save_every, at_least(0, "0 saves only at the end"));
  v.field("keep_last", c.keep_last, at_least(0, "0 keeps every checkpoint"));
  v.field("dtype", c.dtype);
  v.field("device", c.device);
  v.field("threads", c.threads, at_least(0, "0 gives each rank its share of the CPUs it may use"));
}

template <class V>
void visit(V& v, ParallelConfig& c) {
  v.field("dp", c.dp, at_least(-1, "-1 infers dp from the world size"));
  v.field("cp", c.cp, at_least(1));
  v.field("tp", c.tp, at_least(1));
  v.field("backend", c.backend);
  v.field("timeout_s", c.timeout_s, above(0));
  v.field("rollout_ranks", c.rollout_ranks, at_least(0, "0: every rank generates and trains"));
}

template <class V>
void visit(V& v, OptimConfig& c) {
  v.field("lr", c.lr, above(0));
  v.field("weight_decay", c.weight_decay, at_least(0));
  v.field("betas", c.betas, half_open(0, 1), 2);
  v.field("eps", c.eps, above(0));
  v.field("grad_clip", c.grad_clip, at_least(0, "0 disables clipping"));
  v.field("warmup_steps", c.warmup_steps, at_least(0));
  v.field("schedule", c.schedule);
  v.field("moments", c.moments);
}

template <class V>
void visit(V& v, TrainConfig& c) {
  v.field("num_mini_batches", c.num_mini_batches, at_least(1));
  v.field("micro_batch_size", c.micro_batch_size, at_least(1));
  v.field("max_tokens_per_micro", c.max_tokens_per_micro, at_least(1));
  v.field("loss_agg_mode", c.loss_agg_mode);
  v.field("overlap", c.overlap);
  v.field("attention", c.attention);
  v.field("recompute", c.recompute);
}

template <class V>
void visit(V& v, RewardConfig& c) {
  v.field("kind", c.kind);
  v.field("command", c.command);
  v.field("timeout_s", c.timeout_s, above(0));
}

template <class V>
void visit(V& v, RopeScalingConfig& c) {
  v.field("type", c.type);
  v.field("factor", c.factor, at_least(1));
  v.field("low_freq_factor", c.low_freq_factor, above(0));
  v.field("high_freq_factor", c.high_freq_factor, above(0));
  v.field("original_max_seq_len", c.original_max_seq_len, at_least(0));
}

template <class V>
void visit(V& v, ArModelConfig& c) {
  v.field("hf_dir", c.hf_dir);
  v.field("arch", c.arch);
  // Far beyond any real model, far below what overflows a size: config.json gets the same bound.
  const Range dim = closed(1, 16777216);
  v.field("vocab_size", c.vocab_size, dim);
  v.field("hidden_size", c.hidden_size, dim);
  v.field("num_layers", c.num_layers, dim);
  v.field("num_heads", c.num_heads, dim);
  v.field("num_kv_heads", c.num_kv_heads, dim);
  v.field("intermediate_size", c.intermediate_size, dim);
  v.field("max_seq_len", c.max_seq_len, closed(2, 16777216));
  v.field("rope_theta", c.rope_theta, above(0));
  v.field("rms_eps", c.rms_eps, above(0));
  v.field("tie_embeddings", c.tie_embeddings);
  v.field("qkv_bias", c.qkv_bias);
  v.field("qk_norm", c.qk_norm);
  v.field("head_dim", c.head_dim, closed(2, 16777216));
  v.field("sliding_window", c.sliding_window, closed(1, 16777216));
  v.field("full_attention_layers", c.full_attention_layers, at_least(0));
  v.field("rope_local_theta", c.rope_local_theta, above(0));
  v.field("block", c.block);
  v.field("query_pre_attn_scalar", c.query_pre_attn_scalar, above(0));
  v.section("rope_scaling", c.rope_scaling);
  v.field("bos_token_id", c.bos_token_id, at_least(0));
  v.field("eos_token_ids", c.eos_token_ids, at_least(0));
}

template <class V>
void visit(V& v, TokenizerConfig& c) {
  v.field("kind", c.kind);
  v.field("path", c.path);
  v.field("alphabet", c.alphabet);
}

template <class V>
void visit(V& v, ArDataConfig& c) {
  v.choice("task", c.task, registered_names(NameTable::kArTask));
  v.field("path", c.path);
  v.field("prompt_key", c.prompt_key);
  v.field("answer_key", c.answer_key);
  v.field("shuffle", c.shuffle);
  v.field("min_digits", c.min_digits, closed(1, 9));
  v.field("max_digits", c.max_digits, closed(1, 9));
  v.field("chat_template", c.chat_template);
  v.field("system_prompt", c.system_prompt);
  v.field("chat_template_kwargs", c.chat_template_kwargs);
}

template <class V>
void visit(V& v, ArRolloutConfig& c) {
  v.field("prompts_per_step", c.prompts_per_step, at_least(1));
  v.field("group_size", c.group_size, at_least(2, "GRPO needs at least two samples per group"));
  v.field("max_new_tokens", c.max_new_tokens, at_least(1));
  v.field("temperature", c.temperature, at_least(0, "0 is greedy decoding"));
  v.field("top_p", c.top_p, open_closed(0, 1));
  v.field("top_k", c.top_k, at_least(0, "0 disables top-k"));
  v.field("stop", c.stop);
  v.field("max_batch", c.max_batch, at_least(1));
  v.field("max_live", c.max_live, at_least(1));
  v.field("dump", c.dump);
  v.field("replay_dir", c.replay_dir);
  v.field("max_staleness", c.max_staleness, at_least(0, "0 waits for every update"));
}

template <class V>
void visit(V& v, ArKlConfig& c) {
  v.field("coef", c.coef, at_least(0));
  v.field("estimator", c.estimator);
}

template <class V>
void visit(V& v, ArAlgoConfig& c) {
  v.field("norm_by_std", c.norm_by_std);
  v.field("adv_eps", c.adv_eps, above(0));
  v.field("adv_clip", c.adv_clip, above(0));
  v.field("clip_low", c.clip_low, open(0, 1));
  v.field("clip_high", c.clip_high, above(0));
  v.field("clip_c", c.clip_c, above(1, "the dual-clip bound must exceed 1"));
  v.field("ratio", c.ratio);
  v.section("kl", c.kl);
  v.field("entropy_coef", c.entropy_coef, any());
  v.field("old_logp", c.old_logp);
  v.field("filter_zero_variance_groups", c.filter_zero_variance_groups);
  v.field("loss_norm_len", c.loss_norm_len, at_least(1));
  v.field("tis_cap", c.tis_cap, above(0));
}

template <class V>
void visit(V& v, ArWarmstartConfig& c) {
  v.field("steps", c.steps, at_least(0, "0 disables the warm-start"));
  v.field("lr", c.lr, above(0));
  v.field("warmup_steps", c.warmup_steps, at_least(0));
  v.field("schedule", c.schedule);
  v.field("batch_size", c.batch_size, at_least(1));
  v.field("demos", c.demos);
}

template <class V>
void visit(V& v, LoraConfig& c) {
  v.field("rank", c.rank, closed(0, 4096));
  v.field("alpha", c.alpha, above(0));
  v.field("targets", c.targets);
  v.field("dropout", c.dropout, at_least(0));
}

template <class V>
void visit(V& v, ArEnvConfig& c) {
  v.choice("name", c.name, {"none", "calculator", "guess", "lookup", "command"});
  v.field("command", c.command);
  v.field("timeout_s", c.timeout_s, above(0));
  v.field("max_turns", c.max_turns, closed(0, 1000));
  v.field("max_turn_tokens", c.max_turn_tokens, at_least(1));
  v.field("max_tokens", c.max_tokens, at_least(2));
  v.field("max_failed_fraction", c.max_failed_fraction, closed(0, 1));
  v.field("slots", c.slots, at_least(1));
  v.field("samples", c.samples);
}

template <class V>
void visit(V& v, ArTrackConfig& c) {
  v.field("enabled", c.enabled);
  v.field("weight", c.weight, above(0));
  v.field("micro_batch_size", c.micro_batch_size, at_least(1));
  v.field("max_tokens_per_micro", c.max_tokens_per_micro, at_least(1));
  v.field("loss_agg_mode", c.loss_agg_mode);
  v.field("layout", c.layout);
  v.field("share_prompt", c.share_prompt);
  v.section("model", c.model);
  v.section("tokenizer", c.tokenizer);
  v.section("data", c.data);
  v.section("reward", c.reward);
  v.section("rollout", c.rollout);
  v.section("algo", c.algo);
  v.section("warmstart", c.warmstart);
  v.section("lora", c.lora);
  v.section("env", c.env);
}

template <class V>
void visit(V& v, ImageModelConfig& c) {
  v.field("arch", c.arch);
  v.field("image_size", c.image_size, closed(1, 4096));
  v.field("channels", c.channels, closed(1, 64));
  v.field("patch_size", c.patch_size, closed(1, 4096));
  v.field("hidden_size", c.hidden_size, closed(1, 65536));
  v.field("num_layers", c.num_layers, closed(1, 4096));
  v.field("num_heads", c.num_heads, closed(1, 4096));
  v.field("num_classes", c.num_classes, closed(1, 1000000));
}

template <class V>
void visit(V& v, ImageDataConfig& c) {
  v.choice("task", c.task, registered_names(NameTable::kImageTask));
}

template <class V>
void visit(V& v, SamplerConfig& c) {
  v.field("steps", c.steps, at_least(1));
  v.field("eval_steps", c.eval_steps, at_least(1));
  v.field("noise_level", c.noise_level, above(0));  // 0: no noise, no log-prob (the ODE sampler's Euler step)
  v.field("shift", c.shift, above(0));
  v.field("cfg", c.cfg, at_least(0));
  v.field("timestep_fraction", c.timestep_fraction, open_closed(0, 1));
}

template <class V>
void visit(V& v, ImageRolloutConfig& c) {
  v.field("prompts_per_step", c.prompts_per_step, at_least(1));
  v.field("group_size", c.group_size, at_least(2, "GRPO needs at least two samples per group"));
  v.field("dump", c.dump);
  v.field("replay_dir", c.replay_dir);
}

template <class V>
void visit(V& v, ImageKlConfig& c) {
  v.field("coef", c.coef, at_least(0));
}

template <class V>
void visit(V& v, ImageAlgoConfig& c) {
  v.field("clip_range", c.clip_range, open(0, 1));
  v.field("adv_clip_max", c.adv_clip_max, above(0));
  v.section("kl", c.kl);
  v.field("old_logp", c.old_logp);
  v.field("cfg_grad", c.cfg_grad);
}

template <class V>
void visit(V& v, ImagePretrainConfig& c) {
  v.field("steps", c.steps, at_least(0, "0 skips pretraining"));
  v.field("lr", c.lr, above(0));
  v.field("batch_size", c.batch_size, at_least(1));
  v.field("label_dropout", c.label_dropout, half_open(0, 1));
  v.field("path", c.path);
}

template <class V>
void visit(V& v, ImageTrackConfig& c) {
  v.field("enabled", c.enabled);
  v.field("weight", c.weight, above(0));
  v.field("micro_batch_size", c.micro_batch_size, at_least(1));
  v.field("max_tokens_per_micro", c.max_tokens_per_micro, at_least(1));
  v.field("loss_agg_mode", c.loss_agg_mode);
  v.section("model", c.model);
  v.section("data", c.data);
  v.section("reward", c.reward);
  v.section("sampler", c.sampler);
  v.section("rollout", c.rollout);
  v.section("algo", c.algo);
  v.section("pretrain", c.pretrain);
  v.section("lora", c.lora);
}

template <class V>
void visit(V& v, TracksConfig& c) {
  v.section("ar", c.ar);
  v.section("image", c.image);
}

template <class V>
void visit(V& v, EvalImageConfig& c) {
  v.field("samples_per_class", c.samples_per_class, closed(1, 64));
}

template <class V>
void visit(V& v, EvalConfig& c) {
  v.field("every", c.every, at_least(0, "0 evaluates only at_start"));
  v.field("at_start", c.at_start);
  v.field("samples_per_prompt", c.samples_per_prompt, closed(1, 1024));
  v.field("temperature", c.temperature, closed(0, 100));
  v.field("max_new_tokens", c.max_new_tokens, at_least(1));
  v.field("max_prompts", c.max_prompts, closed(1, 1000000));
  v.field("correct_at", c.correct_at, any());
  v.section("data", c.data);
  v.section("image", c.image);
}

template <class V>
void visit(V& v, Config& c) {
  v.section("run", c.run);
  v.section("parallel", c.parallel);
  v.section("optim", c.optim);
  v.section("train", c.train);
  v.section("tracks", c.tracks);
  v.section("eval", c.eval);
}

}  // namespace tandem::schema
