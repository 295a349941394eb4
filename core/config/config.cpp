// Recipe loading: YAML text -> --set overrides -> typed structs (config_schema.cpp) -> the
// cross-field rules below. All failures are UserError with the key path in the message.
#include "core/config/config.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "common/regular_file.h"
#include "core/config/model_dir.h"
#include "core/config/name_tables.h"
#include "parallel/parallel_dims.h"

namespace tandem {

Config config_from_yaml_node(const YAML::Node& root, std::set<std::string>* given);  // config_schema.cpp
extern const char* const kEmbeddedQuickstart;  // generated from configs/quickstart.yaml

MicroGeometry resolve_geometry(const TrainConfig& train, const std::optional<int64_t>& mbs,
                               const std::optional<int64_t>& budget, const std::optional<LossAggMode>& mode) {
  MicroGeometry g;
  g.micro_batch_size = mbs ? mbs : train.micro_batch_size;
  g.max_tokens_per_micro = budget ? budget : train.max_tokens_per_micro;
  g.loss_agg_mode = mode.value_or(train.loss_agg_mode);
  return g;
}

int64_t image_tokens_per_sample(const ImageModelConfig& model) {
  const int64_t side = model.image_size / model.patch_size;
  return side * side;
}

namespace {

void check_keys(const YAML::Node& node, const std::string& source, const std::string& path);

void apply_override(YAML::Node& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) throw UserError("--set '" + assignment + "': expected key.path=value");
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string part; std::getline(ss, part, '.');) {
    if (part.empty()) throw UserError("--set '" + assignment + "': empty component in key path");
    parts.push_back(part);
  }
  if (path.back() == '.') throw UserError("--set '" + assignment + "': empty component in key path (trailing '.')");
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw UserError("--set " + path + ": cannot parse value '" + text + "': " + e.msg);
  }
  check_keys(value, "--set " + path + " value", path);
  // Walk with fresh handles: assigning one yaml-cpp Node to another copies content, not the handle.
  YAML::Node node = root;
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked += (walked.empty() ? "" : ".") + parts[i];
    YAML::Node child = node[parts[i]];
    if (child.IsDefined() && !child.IsNull() && !child.IsMap())
      throw UserError("--set " + path + ": " + walked + " is not a section");
    if (!child.IsDefined() || child.IsNull()) {
      node[parts[i]] = YAML::Node(YAML::NodeType::Map);
      child = node[parts[i]];
    }
    node.reset(child);
  }
  node[parts.back()] = value;
}

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

std::string track_path(const char* track, const char* key) { return std::string("tracks.") + track + "." + key; }

void require(bool ok, const std::string& path, const std::string& message) {
  if (!ok) throw UserError(path + ": " + message);
}

void validate_geometry(const TrainConfig& train, const char* track, const std::optional<int64_t>& mbs,
                       const std::optional<int64_t>& budget, const std::optional<LossAggMode>& mode,
                       int64_t one_sequence, const std::string& sequence_what) {
  const MicroGeometry g = resolve_geometry(train, mbs, budget, mode);
  require(g.micro_batch_size || g.max_tokens_per_micro, track_path(track, "micro_batch_size"),
          "no micro geometry: set micro_batch_size or max_tokens_per_micro here or under train");
  if (g.max_tokens_per_micro) {
    const std::string where = budget ? track_path(track, "max_tokens_per_micro") : "train.max_tokens_per_micro";
    require(*g.max_tokens_per_micro >= one_sequence, where,
            std::to_string(*g.max_tokens_per_micro) + " is smaller than one full sequence (" + sequence_what + " = " +
                std::to_string(one_sequence) + "); raise the budget");
  }
}

void validate_lora(const Config& c);
void validate_image_lora(const Config& c);
void validate_env(const Config& c);

// The checks a prompt source needs whether it feeds training (tracks.ar.data) or eval (eval.data).
void validate_data_source(const ArDataConfig& d, const std::string& prefix, TokenizerKind tokenizer) {
  require(d.task != "jsonl" || d.path, prefix + ".path", "required when " + prefix + ".task is jsonl");
  // Either key would otherwise be dropped without a word: a file set beside a built-in task trained
  // on the built-in prompts, and a digit count asked of a file changed nothing.
  require(d.task == "jsonl" || !d.path, prefix + ".path",
          "is set, but " + prefix + ".task is " + d.task +
              ", a built-in task that reads no file; set task: jsonl to use the file, or remove path");
  require(d.task != "jsonl" || (!d.min_digits && !d.max_digits), prefix + ".min_digits",
          "min_digits / max_digits set the built-in tasks' digit counts; a jsonl file's prompts are what it holds: "
          "remove them");
  require(!d.min_digits || !d.max_digits || *d.min_digits <= *d.max_digits, prefix + ".min_digits",
          "must not exceed max_digits");
  require(d.task != "shape_corners" || (!d.min_digits && !d.max_digits), prefix + ".min_digits",
          "shape_corners asks about shape classes and has no digit count; remove min_digits / max_digits");
  require(d.task != "multiply" || tokenizer == TokenizerKind::kHf, prefix + ".task",
          "multiply asks in words (\"What is 713 * 11?\"), which the char tokenizer's alphabet does not hold; use "
          "an hf tokenizer");
}

void validate_ar(const Config& c, const parallel::ParallelDims* dims) {
  const ArTrackConfig& ar = c.tracks.ar;
  const ArModelConfig& m = ar.model;
  const std::string mp = "tracks.ar.model";
  require(m.head_dim || m.hidden_size % m.num_heads == 0, mp + ".num_heads",
          std::to_string(m.num_heads) + " does not divide hidden_size " + std::to_string(m.hidden_size));
  const int64_t head_dim = m.head_dim ? *m.head_dim : m.hidden_size / m.num_heads;
  require(head_dim % 2 == 0, m.head_dim ? mp + ".head_dim" : mp + ".hidden_size",
          "head dimension " + std::to_string(head_dim) + " must be even for RoPE");
  if (m.rope_scaling.type == RopeType::kLlama3) {
    require(m.rope_scaling.original_max_seq_len > 0, mp + ".rope_scaling.original_max_seq_len",
            "must be > 0 for rope_scaling type llama3");
    require(m.rope_scaling.high_freq_factor > m.rope_scaling.low_freq_factor, mp + ".rope_scaling.high_freq_factor",
            "must exceed low_freq_factor");
  }
  require(m.num_heads % m.num_kv_heads == 0, mp + ".num_kv_heads",
          std::to_string(m.num_kv_heads) + " does not divide num_heads " + std::to_string(m.num_heads));
  for (const int64_t l : m.full_attention_layers)
    require(l < m.num_layers, mp + ".full_attention_layers",
            "names layer " + std::to_string(l) + " but the model has " + std::to_string(m.num_layers) +
                " (layers count from 0)");
  require(m.sliding_window || (m.full_attention_layers.empty() && !m.rope_local_theta),
          m.full_attention_layers.empty() ? mp + ".rope_local_theta" : mp + ".full_attention_layers",
          "applies to the sliding-window layers: set sliding_window too");
  if (m.block == ArBlock::kGemma3) {
    const std::string why = " (block gemma3: Gemma 3's decoder layer)";
    require(m.sliding_window.has_value(), mp + ".sliding_window", "must be set: the window of its local layers" + why);
    require(m.qk_norm, mp + ".qk_norm", "must be true: its attention normalises queries and keys" + why);
    require(!m.qkv_bias, mp + ".qkv_bias", "must be false: its projections have no biases" + why);
    require(m.rope_scaling.type == RopeType::kNone || m.rope_local_theta.has_value(), mp + ".rope_local_theta",
            "must be set with rope_scaling: its local layers keep their own, unscaled RoPE base" + why);
  } else {
    require(!m.query_pre_attn_scalar, mp + ".query_pre_attn_scalar", "applies to block gemma3 only");
  }
  run_ar_model_rules(c);
  if (!m.hf_dir) {
    // A fresh model is sized from these keys: refuse one this machine cannot hold before anything
    // is allocated (float32 weights, gradients and two AdamW moments: 16 bytes a parameter).
    const double d = static_cast<double>(m.hidden_size), f = static_cast<double>(m.intermediate_size);
    const double hd = static_cast<double>(head_dim), v = static_cast<double>(m.vocab_size);
    const double per_layer = d * hd * static_cast<double>(2 * m.num_heads + 2 * m.num_kv_heads) + 3 * d * f + 4 * d;
    const double params = v * d * (m.tie_embeddings ? 1 : 2) + static_cast<double>(m.num_layers) * per_layer + d;
    const double need = params * 16, have = physical_memory_bytes();
    require(have <= 0 || need <= have, mp,
            "a model of " + std::to_string(static_cast<int64_t>(params)) + " parameters needs about " +
                std::to_string(static_cast<int64_t>(need / (1 << 30))) +
                " GiB for float32 weights, gradients and "
                "AdamW state, more than this machine's " +
                std::to_string(static_cast<int64_t>(have / (1 << 30))) + " GiB; lower its dimensions");
  }
  require(ar.rollout.max_new_tokens < m.max_seq_len, "tracks.ar.rollout.max_new_tokens",
          std::to_string(ar.rollout.max_new_tokens) + " leaves no room for a prompt within model.max_seq_len " +
              std::to_string(m.max_seq_len));
  if (dims && dims->tp() > 1) {
    const int64_t tp = dims->tp();
    for (auto [key, value] : {std::pair<const char*, int64_t>{"num_heads", m.num_heads},
                              {"num_kv_heads", m.num_kv_heads},
                              {"intermediate_size", m.intermediate_size},
                              {"vocab_size", m.vocab_size}})
      require(value % tp == 0, mp + "." + key,
              std::to_string(value) + " is not divisible by parallel.tp=" + std::to_string(tp));
  }
  require(ar.tokenizer.kind != TokenizerKind::kHf || ar.tokenizer.path, "tracks.ar.tokenizer.path",
          "required when tokenizer.kind is hf");
  require(ar.tokenizer.kind != TokenizerKind::kChar || !ar.tokenizer.alphabet.empty(), "tracks.ar.tokenizer.alphabet",
          "must not be empty for the char tokenizer");
  validate_data_source(ar.data, "tracks.ar.data", ar.tokenizer.kind);
  const auto& names = registered_names(NameTable::kArReward);
  require(std::find(names.begin(), names.end(), ar.reward.kind) != names.end(), "tracks.ar.reward.kind",
          unknown_name_message("AR reward", ar.reward.kind, names));
  require(ar.reward.kind != "command" || ar.reward.command, "tracks.ar.reward.command",
          "required when reward.kind is command");
  require(ar.algo.old_logp != OldLogp::kReuse || c.train.num_mini_batches == 1, "tracks.ar.algo.old_logp",
          "reuse is exact only with train.num_mini_batches: 1 (got " + std::to_string(c.train.num_mini_batches) +
              "); use recompute");
  require(ar.warmstart.steps == 0 || ar.data.task != "jsonl" || !ar.data.answer_key.empty(),
          "tracks.ar.warmstart.steps", "a warm-start needs reference answers (data.answer_key)");
  validate_lora(c);
  validate_env(c);
  validate_geometry(c.train, "ar", ar.micro_batch_size, ar.max_tokens_per_micro, ar.loss_agg_mode, m.max_seq_len,
                    "tracks.ar.model.max_seq_len");
}

// tracks.ar.env: what the multi-turn rollout (core/env, TurnSampler) supports today.
void validate_env(const Config& c) {
  const ArTrackConfig& ar = c.tracks.ar;
  const ArEnvConfig& e = ar.env;
  require(e.name == "command" || !e.command, "tracks.ar.env.command",
          "is the process of env name command; with name " + e.name + " leave it out");
  require(e.enabled() || !ar.warmstart.demos, "tracks.ar.warmstart.demos",
          "are multi-turn conversations for tracks.ar.env; without an environment the warm-start trains on the "
          "task's reference answers: remove demos");
  require(e.enabled() || e.samples == EnvSamples::kEpisode, "tracks.ar.env.samples",
          "turn splits multi-turn episodes into one sample per model turn; without tracks.ar.env.name there are "
          "none: remove it");
  if (!e.enabled()) return;
  // A rank waiting out a hung environment (then its restart's hello, as long again) keeps the other
  // ranks in a collective: past parallel.timeout_s the watchdog ends the job, where a hung
  // environment should fail only its own episodes.
  const auto secs = [](double x) {
    std::ostringstream o;
    o << x;
    return o.str();
  };
  require(2 * e.timeout_s <= c.parallel.timeout_s, "tracks.ar.env.timeout_s",
          secs(e.timeout_s) + " s is more than half of parallel.timeout_s " + secs(c.parallel.timeout_s) +
              " s: other ranks wait in a collective while one waits out a hung environment and its restart, and the "
              "collective watchdog would end the job; lower tracks.ar.env.timeout_s or raise parallel.timeout_s");
  const std::string why = " (tracks.ar.env.name " + e.name + " turns multi-turn episodes on)";
  require(e.name != "command" || (e.command && !e.command->empty()), "tracks.ar.env.command",
          "is required when env.name is command (a process speaking docs/env_protocol.md)");
  require(ar.model.arch == ArArch::kLlama, "tracks.ar.env.name",
          "episodes run on the llama architecture's KV-cache sampler; arch unified has none" + why);
  require(ar.tokenizer.kind == TokenizerKind::kHf && ar.data.chat_template != "none", "tracks.ar.env.name",
          "episodes are rendered by the model's chat template: use an hf tokenizer with a chat template" + why);
  require(c.parallel.rollout_ranks == 0, "tracks.ar.env.name",
          "episodes are generated on the training ranks for now: set parallel.rollout_ranks to 0" + why);
  require(!c.train.overlap, "tracks.ar.env.name",
          "episodes do not overlap with the reference pass yet: set "
          "train.overlap to false" +
              why);
  require(!ar.rollout.replay_dir, "tracks.ar.rollout.replay_dir", "replays single-turn rollouts; leave it out" + why);
  require(ar.warmstart.steps == 0 || (ar.warmstart.demos && !ar.warmstart.demos->empty()), "tracks.ar.warmstart.demos",
          "is required for a warm-start with episodes: a JSON-lines file of demonstrated conversations "
          "(docs/env_protocol.md), whose model turns it trains on" +
              why);
  const int64_t cap = e.max_tokens.value_or(ar.model.max_seq_len);
  require(cap <= ar.model.max_seq_len, "tracks.ar.env.max_tokens",
          std::to_string(cap) + " exceeds tracks.ar.model.max_seq_len " + std::to_string(ar.model.max_seq_len));
  require(e.max_turn_tokens.value_or(ar.rollout.max_new_tokens) < cap, "tracks.ar.env.max_turn_tokens",
          "must leave room for the prompt within the episode's max_tokens " + std::to_string(cap));
}

// A LoRA section's dropout and targets: `all-linear` alone, or distinct names from `names`.
void validate_lora_section(const LoraConfig& l, const std::string& prefix, const std::vector<std::string>& names) {
  require(l.dropout == 0, prefix + ".dropout",
          "must be 0: dropout on the adapters' input would make the old / reference log-probs and the sampler "
          "disagree with the trained forward");
  require(!l.targets.empty(), prefix + ".targets", "must be all-linear or a non-empty list of layer names");
  std::string listed;
  for (const std::string& n : names) listed += (listed.empty() ? "" : ", ") + n;
  std::set<std::string> seen;
  for (const std::string& t : l.targets) {
    if (t == "all-linear") {
      require(l.targets.size() == 1, prefix + ".targets", "all-linear stands alone (it names " + listed + ")");
      continue;
    }
    require(std::find(names.begin(), names.end(), t) != names.end(), prefix + ".targets",
            "unknown layer '" + t + "'; use all-linear or names from " + listed);
    require(seen.insert(t).second, prefix + ".targets", "'" + t + "' is listed twice");
  }
}

// tracks.ar.lora: what the adapters (models/llama/lora.h; on arch unified, models/layers/lora_linear.h
// on its shared trunk, which an image track with arch shared trains too) can do exactly.
void validate_lora(const Config& c) {
  const LoraConfig& l = c.tracks.ar.lora;
  if (!l.enabled()) return;
  const std::string why = " (tracks.ar.lora.rank " + std::to_string(l.rank) + " turns LoRA on)";
  validate_lora_section(l, "tracks.ar.lora",
                        {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"});
  // With LoRA the warm-start trains the base itself (a stand-in for pretraining a random init).
  require(c.tracks.ar.warmstart.steps == 0 || !c.tracks.ar.model.hf_dir, "tracks.ar.warmstart.steps",
          "with tracks.ar.lora the warm-start trains the base, but this base is tracks.ar.model.hf_dir's weights, "
          "which the adapters' checkpoints, rollout ranks and exports take as they are on disk; set "
          "warmstart.steps: 0, or warm-start without LoRA, export that run and train LoRA on the export");
  require(c.tracks.ar.warmstart.steps == 0 || c.run.dtype != DType::kBFloat16, "tracks.ar.warmstart.steps",
          "with tracks.ar.lora and run.dtype bfloat16 the warm-start would train the bf16 base without float32 "
          "master weights (only the adapters have them); use run.dtype float32 or warmstart.steps: 0");
}

// tracks.image.lora: adapters on the DiT's projections (models/dit/dit_layers.h).
void validate_image_lora(const Config& c) {
  const ImageTrackConfig& im = c.tracks.image;
  if (!im.enabled || !im.lora.enabled()) return;
  const std::string why = " (tracks.image.lora.rank " + std::to_string(im.lora.rank) + " turns LoRA on)";
  require(im.model.arch == ImageArch::kDit, "tracks.image.lora.rank",
          "LoRA adapts the track's own DiT; a model shared with the AR track (arch shared) takes its adapters "
          "from tracks.ar.lora (they serve both tracks): set this rank 0 and tracks.ar.lora instead" +
              why);
  validate_lora_section(im.lora, "tracks.image.lora", {"qkv", "proj", "mlp_fc1", "mlp_fc2"});
  // The pretraining trains the base itself (a stand-in for the pretrained model LoRA starts from).
  require(im.pretrain.steps == 0 || c.run.dtype != DType::kBFloat16, "tracks.image.pretrain.steps",
          "with tracks.image.lora and run.dtype bfloat16 the pretraining would train the bf16 base without "
          "float32 master weights (only the adapters have them); pretrain with run.dtype float32 "
          "(tandem pretrain-flow) and load it from tracks.image.pretrain.path with steps: 0");
}

// train.overlap and parallel.rollout_ranks (hybrid-async rollout) and the staleness they allow.
void validate_async(const Config& c) {
  const ArTrackConfig& ar = c.tracks.ar;
  if (c.train.overlap) {
    require(ar.enabled, "train.overlap", "overlaps the AR track's rollout; enable tracks.ar or set it to false");
    require(ar.algo.old_logp != OldLogp::kReuse, "train.overlap",
            "cannot be combined with tracks.ar.algo.old_logp: reuse (there is no old-log-prob pass to overlap); "
            "use old_logp: recompute or set train.overlap: false");
    require(!ar.algo.filter_zero_variance_groups, "train.overlap",
            "cannot be combined with tracks.ar.algo.filter_zero_variance_groups (filtering moves the mini-batch "
            "boundaries after the whole step is sampled); set one of them to false");
    require(ar.rollout.prompts_per_step % c.train.num_mini_batches == 0, "train.overlap",
            "needs tracks.ar.rollout.prompts_per_step (" + std::to_string(ar.rollout.prompts_per_step) +
                ") divisible by train.num_mini_batches (" + std::to_string(c.train.num_mini_batches) +
                ") so that every mini-batch holds whole groups");
    require(!ar.rollout.replay_dir, "train.overlap", "has nothing to overlap with tracks.ar.rollout.replay_dir");
    require(c.parallel.tp == 1 && c.parallel.cp == 1, "train.overlap",
            "needs parallel.tp: 1 and parallel.cp: 1 (the overlapped forward would share their communicators "
            "with the sampler)");
    require(c.parallel.rollout_ranks == 0, "train.overlap",
            "cannot be combined with parallel.rollout_ranks > 0 (rollout ranks already overlap generation)");
  }
  if (c.parallel.rollout_ranks > 0) {
    require(ar.enabled && !c.tracks.image.enabled, "parallel.rollout_ranks",
            "disaggregated rollout serves the AR track alone; disable tracks.image or set rollout_ranks: 0");
    require(c.parallel.tp == 1, "parallel.rollout_ranks",
            "needs parallel.tp: 1 (rollout ranks hold the whole model, broadcast from train rank 0)");
    require(!ar.rollout.replay_dir, "parallel.rollout_ranks",
            "has nothing to generate with tracks.ar.rollout.replay_dir");
  }
  require(ar.rollout.max_staleness == 0 || c.parallel.rollout_ranks > 0, "tracks.ar.rollout.max_staleness",
          "only applies to disaggregated rollout; set parallel.rollout_ranks > 0 or max_staleness: 0");
  require(ar.rollout.max_staleness == 0 || ar.algo.tis_cap, "tracks.ar.rollout.max_staleness",
          std::to_string(ar.rollout.max_staleness) +
              " trains on samples of older weights; set tracks.ar.algo.tis_cap (e.g. 2.0) so the loss corrects "
              "for the stale behaviour policy, or use max_staleness: 0");
}

void validate_image(const Config& c) {
  const ImageTrackConfig& im = c.tracks.image;
  const ImageModelConfig& m = im.model;
  const std::string mp = "tracks.image.model";
  require(m.image_size % m.patch_size == 0, mp + ".patch_size",
          std::to_string(m.patch_size) + " does not divide image_size " + std::to_string(m.image_size));
  require(m.hidden_size % m.num_heads == 0, mp + ".num_heads",
          std::to_string(m.num_heads) + " does not divide hidden_size " + std::to_string(m.hidden_size));
  require(im.sampler.eval_steps >= 1 && im.sampler.steps >= 1, "tracks.image.sampler.steps", "must be >= 1");
  // The image track shards its work over dp only: under cp every cp rank would train the same
  // samples and the gradient reduction (over dp x cp) would add them up cp times.
  require(c.parallel.cp == 1, "parallel.cp",
          std::to_string(c.parallel.cp) +
              " with tracks.image: the image track does not split its work over cp ranks (each would train "
              "the same samples, and their gradients would count cp times); use cp 1 with the image track");
  // Dumping and replaying rollouts exist for the AR track only; accepting the keys here would
  // silently do nothing.
  require(!im.rollout.dump, "tracks.image.rollout.dump", "is not implemented for the image track; set it to false");
  require(!im.rollout.replay_dir, "tracks.image.rollout.replay_dir",
          "is not implemented for the image track; remove it");
  if (m.arch == ImageArch::kShared) {
    const ArTrackConfig& ar = c.tracks.ar;
    require(ar.enabled && ar.model.arch == ArArch::kUnified, mp + ".arch",
            "shared draws with the AR track's model: enable tracks.ar and set tracks.ar.model.arch: unified");
    for (auto [key, mine, trunk] :
         {std::tuple<const char*, int64_t, int64_t>{"hidden_size", m.hidden_size, ar.model.hidden_size},
          {"num_layers", m.num_layers, ar.model.num_layers},
          {"num_heads", m.num_heads, ar.model.num_heads}})
      require(mine == trunk, mp + "." + key,
              std::to_string(mine) + " differs from tracks.ar.model." + key + " " + std::to_string(trunk) +
                  ": with arch shared there is one trunk, tracks.ar.model's; set both to " + std::to_string(trunk));
    require(im.pretrain.steps == 0 || ar.warmstart.steps <= im.pretrain.steps, "tracks.ar.warmstart.steps",
            std::to_string(ar.warmstart.steps) + " exceeds tracks.image.pretrain.steps " +
                std::to_string(im.pretrain.steps) +
                ": a shared model's text warm-start steps interleave with its "
                "flow pretraining steps (at most one after each); lower it");
  }
  const auto& names = registered_names(NameTable::kImageReward);
  require(std::find(names.begin(), names.end(), im.reward.kind) != names.end(), "tracks.image.reward.kind",
          unknown_name_message("image reward", im.reward.kind, names));
  require(im.reward.kind != "command" || im.reward.command, "tracks.image.reward.command",
          "required when reward.kind is command");
  require(im.algo.old_logp != OldLogp::kReuse || c.train.num_mini_batches == 1, "tracks.image.algo.old_logp",
          "reuse is exact only with train.num_mini_batches: 1; use recompute");
  validate_geometry(c.train, "image", im.micro_batch_size, im.max_tokens_per_micro, im.loss_agg_mode,
                    image_tokens_per_sample(m), "patches per image");
}

}  // namespace

void validate(const Config& c, int64_t world_size) {
  require(c.tracks.ar.enabled || c.tracks.image.enabled, "tracks",
          "no track is enabled; set tracks.ar.enabled or tracks.image.enabled to true");
  require(c.parallel.dp != 0, "parallel.dp", "0 is not a layout; use -1 to infer it");
  std::optional<parallel::ParallelDims> dims;
  if (world_size > 0) {
    require(c.parallel.rollout_ranks < world_size, "parallel.rollout_ranks",
            std::to_string(c.parallel.rollout_ranks) + " leaves no train rank in a world of " +
                std::to_string(world_size) + "; launch more ranks or lower it");
    dims = parallel::ParallelDims::resolve(c.parallel.dp, c.parallel.cp, c.parallel.tp,
                                           world_size - c.parallel.rollout_ranks);
  }
  validate_async(c);
  const bool llama = c.tracks.ar.enabled && c.tracks.ar.model.arch == ArArch::kLlama;
  require(llama || c.train.attention == AttentionImpl::kAuto, "train.attention",
          "chooses the attention of the AR track's Llama-family decoder; with no such track (or arch unified, "
          "which always fuses but in float64) leave it auto");
  require(llama || c.train.recompute == Recompute::kNone, "train.recompute",
          "recomputes the layers of the AR track's Llama-family decoder; with no such track (or arch unified) "
          "set it to none");
  if (c.eval.enabled() && c.tracks.ar.enabled) {
    const ArDataConfig& d = c.eval.data;
    validate_data_source(d, "eval.data", c.tracks.ar.tokenizer.kind);
    const int64_t new_tokens = c.eval.max_new_tokens.value_or(c.tracks.ar.rollout.max_new_tokens);
    require(new_tokens < c.tracks.ar.model.max_seq_len, "eval.max_new_tokens",
            std::to_string(new_tokens) + " leaves no room for a prompt within tracks.ar.model.max_seq_len " +
                std::to_string(c.tracks.ar.model.max_seq_len));
  }
  if (c.tracks.ar.enabled) validate_ar(c, dims ? &*dims : nullptr);
  if (c.tracks.image.enabled) validate_image(c), validate_image_lora(c);
}

namespace {

std::string line_of(const YAML::Node& n) { return n.Mark().line >= 0 ? std::to_string(n.Mark().line + 1) : "?"; }

// A recipe is a few hundred nodes; YAML aliases can make a short document expand to billions (the
// "billion laughs"), which every later walk would follow. Counted as expanded, with this cap.
constexpr size_t kMaxRecipeNodes = 100000;

// YAML lets a key repeat (the parser keeps the last) and lets a key be a list or a mapping; in a
// recipe both are mistakes (a section pasted twice, a stray '?'), so they are refused with lines.
// `visited` counts the nodes seen so far, aliases expanded.
void check_keys(const YAML::Node& node, const std::string& source, const std::string& path, size_t& visited) {
  if (++visited > kMaxRecipeNodes)
    throw UserError(source + ": the document expands to more than " + std::to_string(kMaxRecipeNodes) +
                    " YAML nodes (aliases such as *name repeat what they point to); a recipe is a few hundred "
                    "keys: write it out without nested aliases");
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) check_keys(node[i], source, path + "[" + std::to_string(i) + "]", visited);
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, std::string> first_line;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar())
      throw UserError(source + ":" + line_of(kv.first) + ": a key " + (path.empty() ? "" : "in " + path + " ") +
                      "must be a plain name, not a " + (kv.first.IsSequence() ? "list" : "mapping"));
    const std::string key = kv.first.Scalar();
    const std::string at = path.empty() ? key : path + "." + key;
    const auto [it, fresh] = first_line.emplace(key, line_of(kv.first));
    if (!fresh)
      throw UserError(source + ":" + line_of(kv.first) + ": " + at + " is given twice (first at line " + it->second +
                      "); remove one of them");
    check_keys(kv.second, source, at, visited);
  }
}

void check_keys(const YAML::Node& node, const std::string& source, const std::string& path) {
  size_t visited = 0;
  check_keys(node, source, path, visited);
}

YAML::Node parse_recipe(const std::string& yaml_text, const std::string& source_name) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw UserError(source_name + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                    ": YAML parse error: " + e.msg);
  }
  check_keys(root, source_name, "");
  return root;
}

Config load_config_from_node(YAML::Node root, const std::string& source_name, const std::vector<std::string>& overrides,
                             bool resolve) {
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw UserError(source_name + ": the recipe must be a mapping of sections (run, tracks, ...)");
  for (const auto& o : overrides) apply_override(root, o);
  std::set<std::string> given;
  Config config = config_from_yaml_node(root, &given);
  if (resolve) resolve_model_dir(config, given);
  validate(config);
  return config;
}

std::string read_recipe_file(const std::string& path) {
  require_regular_file(path, "the recipe ");
  std::ifstream in(path);
  if (!in) throw UserError(path + ": cannot open recipe file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

Config load_config_from_string(const std::string& yaml_text, const std::string& source_name,
                               const std::vector<std::string>& overrides) {
  return load_config_from_node(parse_recipe(yaml_text, source_name), source_name, overrides, true);
}

Config load_saved_config(const std::string& path, const std::vector<std::string>& overrides) {
  return load_config_from_node(parse_recipe(read_recipe_file(path), path), path, overrides, false);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides, bool resolve_model_dir) {
  if (path.empty())
    return load_config_from_node(parse_recipe(kEmbeddedQuickstart, "<embedded quickstart>"), "<embedded quickstart>",
                                 overrides, resolve_model_dir);
  YAML::Node root = parse_recipe(read_recipe_file(path), path);
  // A named file that holds nothing is a mistake (wrong file, truncated copy), not a request for
  // the defaults, which every key left out already gets.
  if (root.IsNull())
    throw UserError(path +
                    ": the recipe file has no keys (it is empty or only comments); write the recipe into it, "
                    "or leave out --config to run the default recipe");
  return load_config_from_node(root, path, overrides, resolve_model_dir);
}

}  // namespace tandem
