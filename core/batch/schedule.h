// The schedule: rollout -> mini-batch -> dp rank -> micro-batch -> sample indices, computed
// once per step identically on every rank from sample costs alone. It is the only source of
// slicing for every later pass (old log-prob, reference log-prob, training).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/batch/denominators.h"
#include "core/config/enums.h"

namespace tandem {

enum class CostModel { kTokens, kWorkload };

// What the scheduler knows of one sample.
struct SampleCost {
  int64_t tokens = 0;         // THD tokens it occupies (AR: sequence length; image: patches)
  int64_t action_tokens = 0;  // tokens the loss trains on (counts towards N_tok)
  int64_t group_id = 0;
  // Rows a sample shares with the other samples of its group when they sit in one micro and
  // share_prompts is on (AR: its prompt but the last token); 0: nothing to share.
  int64_t shared_tokens = 0;
};

struct ScheduleOptions {
  int64_t dp = 1;
  int64_t num_mini_batches = 1;
  std::optional<int64_t> micro_batch_size;      // rows per micro (used when no token budget)
  std::optional<int64_t> max_tokens_per_micro;  // token budget per micro
  bool keep_groups = false;                     // never split a group across dp ranks
  CostModel cost_model = CostModel::kTokens;
  // Workload cost = tokens + attn_coef * tokens^2. For a decoder with hidden size h the linear
  // layers cost ~24 h^2 FLOPs per token and causal attention ~2 h L per token, so 1 / (12 h).
  double attn_coef = 1.0 / (12.0 * 4096.0);
  double l_norm = 1;                          // copied into every mini's denominators
  bool refine_balance = true;                 // local search after Karmarkar-Karp (false: plain KK, a baseline)
  BatchLayout layout = BatchLayout::kPacked;  // auto: each micro as micro_prefers_padded says
  // A group's samples count their shared rows once: groups stay whole on a dp rank and in one
  // micro where the budget allows (split into chunks that fit where it does not, each chunk
  // repeating the shared rows), and their micros are packed with the rows shared.
  bool share_prompts = false;
};

// auto picks the padded (B, T_max) layout for a micro when its padding is at most this fraction
// of the padded tokens (and, under a token budget, B * T_max fits the budget): padded then does
// the same arithmetic as packed with fewer gathers (README, "bench train").
inline constexpr double kAutoPaddedMaxWaste = 0.0;
bool micro_prefers_padded(int64_t rows, int64_t max_tokens, int64_t tokens, const ScheduleOptions& options);

struct MicroBatch {
  std::vector<int64_t> samples;  // rollout indices, ascending
  int64_t tokens = 0;
  int64_t action_tokens = 0;      // this micro's share of N_tok
  int64_t action_seqs = 0;        // this micro's share of N_seq
  int64_t max_tokens = 0;         // its longest sample (the padded layout's T)
  bool padded = false;            // collate as (B, T_max) instead of packed THD
  bool share_prompts = false;     // packed with each group's shared rows once (collate_packed)
  LossDenominators denominators;  // the whole mini-batch's
};

struct RankPlan {
  std::vector<MicroBatch> micros;
  double cost = 0;
  int64_t tokens = 0;
};

struct MiniBatchPlan {
  std::vector<RankPlan> ranks;  // (dp)
  LossDenominators denominators;
};

struct Schedule {
  int64_t dp = 1;
  CostModel cost_model = CostModel::kTokens;
  std::vector<MiniBatchPlan> minis;

  std::vector<int64_t> rank_samples(int64_t mini, int64_t rank) const;  // every sample of a rank's part
};

double sample_cost(const SampleCost& s, const ScheduleOptions& o);

// Tokens `members` (sample indices, ascending) occupy in one micro: with share_prompts, a run of
// samples of one group counts its shared rows once.
int64_t micro_tokens(const std::vector<SampleCost>& samples, const std::vector<int64_t>& members, bool share_prompts);

// Throws UserError when a sample exceeds the token budget or the options are invalid.
Schedule build_schedule(const std::vector<SampleCost>& samples, const ScheduleOptions& options);

// Figures of a schedule, for benchmarks and step metrics.
struct ScheduleStats {
  double balance = 1;  // max over minis of (max rank cost / mean rank cost)
  int64_t micros = 0;
  int64_t micros_lower_bound = 0;  // sum over (mini, rank) of ceil(rank tokens / budget)
  int64_t max_micro_tokens = 0;
  double padded_waste = 0;  // padding fraction of a (B, T_max) layout of every micro
  double packed_waste = 0;  // trailing-slot fraction of the packed layout
};
ScheduleStats schedule_stats(const Schedule& schedule, const std::vector<SampleCost>& samples,
                             const ScheduleOptions& options);

}  // namespace tandem
