// Group-aware DP partition (Karmarkar-Karp on cost) and micro-batch packing (rows, or a token
// budget packed to the bin-count lower bound when possible), per mini-batch.
#include "core/batch/schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "common/error.h"
#include "core/batch/partition.h"

namespace tandem {

namespace {

// Units are what the dp partition moves: whole groups (keep_groups) or single samples.
std::vector<std::vector<int64_t>> make_units(const std::vector<SampleCost>& samples, bool keep_groups) {
  std::vector<std::vector<int64_t>> units;
  if (!keep_groups) {
    for (size_t i = 0; i < samples.size(); ++i) units.push_back({static_cast<int64_t>(i)});
    return units;
  }
  std::map<int64_t, size_t> unit_of_group;  // in order of first appearance
  for (size_t i = 0; i < samples.size(); ++i) {
    auto [it, inserted] = unit_of_group.emplace(samples[i].group_id, units.size());
    if (inserted) units.emplace_back();
    units[it->second].push_back(static_cast<int64_t>(i));
  }
  return units;
}

// A rank's members as the items micro packing moves: single samples, or with share_prompts each
// group's samples, cut into chunks whose shared token count fits the budget (when there is one).
std::vector<std::vector<int64_t>> packing_items(const std::vector<SampleCost>& samples, std::vector<int64_t> members,
                                                const ScheduleOptions& o) {
  std::vector<std::vector<int64_t>> items;
  if (!o.share_prompts) {
    for (int64_t i : members) items.push_back({i});
    return items;
  }
  std::sort(members.begin(), members.end());  // a group's samples are consecutive rollout indices
  for (size_t b = 0; b < members.size();) {
    size_t e = b + 1;
    while (e < members.size() && samples[members[e]].group_id == samples[members[b]].group_id) ++e;
    std::vector<int64_t> chunk;
    for (size_t i = b; i < e; ++i) {
      std::vector<int64_t> grown = chunk;
      grown.push_back(members[i]);
      if (!chunk.empty() && o.max_tokens_per_micro && micro_tokens(samples, grown, true) > *o.max_tokens_per_micro) {
        items.push_back(std::move(chunk));
        chunk = {members[i]};
      } else {
        chunk = std::move(grown);
      }
    }
    items.push_back(std::move(chunk));
    b = e;
  }
  return items;
}

std::vector<MicroBatch> make_micros(const std::vector<SampleCost>& samples, std::vector<int64_t> members,
                                    const ScheduleOptions& o) {
  std::vector<std::vector<int64_t>> groups;
  if (members.empty()) return {};
  if (o.max_tokens_per_micro) {
    const std::vector<std::vector<int64_t>> items = packing_items(samples, members, o);
    std::vector<double> w;
    for (const auto& item : items) w.push_back(static_cast<double>(micro_tokens(samples, item, o.share_prompts)));
    for (auto& bin : pack_bins(w, static_cast<double>(*o.max_tokens_per_micro))) {
      std::vector<int64_t> g;
      for (int64_t j : bin) g.insert(g.end(), items[j].begin(), items[j].end());
      groups.push_back(std::move(g));
    }
  } else {
    if (o.share_prompts) {
      // Rollout order keeps each group's samples together, so a micro shares their prompt.
      std::sort(members.begin(), members.end());
    } else {
      // Longest first, so each padded (B, T_max) micro holds similar lengths.
      std::stable_sort(members.begin(), members.end(),
                       [&](int64_t a, int64_t b) { return samples[a].tokens > samples[b].tokens; });
    }
    const size_t mbs = static_cast<size_t>(*o.micro_batch_size);
    for (size_t s = 0; s < members.size(); s += mbs)
      groups.emplace_back(members.begin() + s, members.begin() + std::min(members.size(), s + mbs));
  }
  std::vector<MicroBatch> micros;
  for (auto& g : groups) {
    MicroBatch m;
    std::sort(g.begin(), g.end());
    m.samples = std::move(g);
    for (int64_t i : m.samples) {
      m.action_tokens += samples[i].action_tokens;
      m.action_seqs += samples[i].action_tokens > 0 ? 1 : 0;
      m.max_tokens = std::max(m.max_tokens, samples[i].tokens);
    }
    m.tokens = micro_tokens(samples, m.samples, o.share_prompts);
    m.share_prompts = o.share_prompts && m.tokens < micro_tokens(samples, m.samples, false);
    m.padded =
        !m.share_prompts && (o.layout == BatchLayout::kPadded ||
                             (o.layout == BatchLayout::kAuto &&
                              micro_prefers_padded(static_cast<int64_t>(m.samples.size()), m.max_tokens, m.tokens, o)));
    micros.push_back(std::move(m));
  }
  return micros;
}

}  // namespace

bool micro_prefers_padded(int64_t rows, int64_t max_tokens, int64_t tokens, const ScheduleOptions& o) {
  const int64_t padded = rows * max_tokens;
  if (padded == 0 || (o.max_tokens_per_micro && padded > *o.max_tokens_per_micro)) return false;
  return static_cast<double>(padded - tokens) <= kAutoPaddedMaxWaste * static_cast<double>(padded);
}

namespace {

void check_options(const std::vector<SampleCost>& samples, const ScheduleOptions& o) {
  if (o.dp < 1) throw UserError("schedule: dp must be >= 1, got " + std::to_string(o.dp));
  if (o.num_mini_batches < 1) throw UserError("schedule: num_mini_batches must be >= 1");
  if (!o.micro_batch_size && !o.max_tokens_per_micro)
    throw UserError("schedule: set micro_batch_size or max_tokens_per_micro");
  if (o.micro_batch_size && *o.micro_batch_size < 1) throw UserError("schedule: micro_batch_size must be >= 1");
  if (o.max_tokens_per_micro && *o.max_tokens_per_micro < 1)
    throw UserError("schedule: max_tokens_per_micro must be >= 1");
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].tokens < 0 || samples[i].action_tokens < 0 || samples[i].action_tokens > samples[i].tokens)
      throw UserError("schedule: sample " + std::to_string(i) + " has inconsistent token counts");
    if (o.max_tokens_per_micro && samples[i].tokens > *o.max_tokens_per_micro)
      throw UserError("schedule: sample " + std::to_string(i) + " has " + std::to_string(samples[i].tokens) +
                      " tokens, over max_tokens_per_micro " + std::to_string(*o.max_tokens_per_micro) +
                      "; raise the budget or cap the sequence length");
  }
}

}  // namespace

int64_t micro_tokens(const std::vector<SampleCost>& samples, const std::vector<int64_t>& members, bool share_prompts) {
  int64_t tokens = 0;
  for (size_t b = 0; b < members.size();) {
    size_t e = b + 1;
    if (share_prompts)
      while (e < members.size() && samples[members[e]].group_id == samples[members[b]].group_id) ++e;
    for (size_t i = b; i < e; ++i) tokens += samples[members[i]].tokens;
    if (e - b >= 2) tokens -= static_cast<int64_t>(e - b - 1) * samples[members[b]].shared_tokens;
    b = e;
  }
  return tokens;
}

double sample_cost(const SampleCost& s, const ScheduleOptions& o) {
  const double t = static_cast<double>(s.tokens);
  return o.cost_model == CostModel::kTokens ? t : t + o.attn_coef * t * t;
}

std::vector<int64_t> Schedule::rank_samples(int64_t mini, int64_t rank) const {
  std::vector<int64_t> out;
  for (const auto& m : minis.at(mini).ranks.at(rank).micros) out.insert(out.end(), m.samples.begin(), m.samples.end());
  std::sort(out.begin(), out.end());
  return out;
}

Schedule build_schedule(const std::vector<SampleCost>& samples, const ScheduleOptions& o) {
  check_options(samples, o);
  Schedule schedule;
  schedule.dp = o.dp;
  schedule.cost_model = o.cost_model;
  const auto units = make_units(samples, o.keep_groups || o.share_prompts);
  const size_t n_units = units.size(), k = static_cast<size_t>(o.num_mini_batches);
  size_t begin = 0;
  for (size_t mi = 0; mi < k; ++mi) {
    // Contiguous, near-equal slices of units: the first (n mod k) minis get one more.
    const size_t count = n_units / k + (mi < n_units % k ? 1 : 0);
    std::vector<size_t> mini_units(count);
    std::iota(mini_units.begin(), mini_units.end(), begin);
    begin += count;

    MiniBatchPlan plan;
    plan.denominators.l_norm = o.l_norm;
    std::vector<double> unit_cost;
    for (size_t u : mini_units) {
      double c = 0;
      for (int64_t i : units[u]) {
        c += sample_cost(samples[i], o);
        plan.denominators.n_tok += static_cast<double>(samples[i].action_tokens);
        plan.denominators.n_seq += samples[i].action_tokens > 0 ? 1 : 0;
      }
      if (o.share_prompts)  // a whole group counts its shared rows once
        c -= static_cast<double>(micro_tokens(samples, units[u], false) - micro_tokens(samples, units[u], true));
      unit_cost.push_back(c);
    }
    for (const auto& part : karmarkar_karp(unit_cost, o.dp, o.refine_balance)) {
      RankPlan rank;
      std::vector<int64_t> members;
      for (int64_t j : part)
        for (int64_t i : units[mini_units[j]]) members.push_back(i);
      for (int64_t j : part) rank.cost += unit_cost[j];
      for (int64_t i : members) rank.tokens += samples[i].tokens;
      rank.micros = make_micros(samples, members, o);
      if (o.share_prompts) {
        rank.tokens = 0;
        for (const auto& m : rank.micros) rank.tokens += m.tokens;
      }
      for (auto& m : rank.micros) m.denominators = plan.denominators;
      plan.ranks.push_back(std::move(rank));
    }
    schedule.minis.push_back(std::move(plan));
  }
  return schedule;
}

ScheduleStats schedule_stats(const Schedule& schedule, const std::vector<SampleCost>& samples,
                             const ScheduleOptions& o) {
  ScheduleStats st;
  st.balance = 1;
  double padded_total = 0, padded_pad = 0, packed_total = 0, packed_slots = 0;
  for (const auto& mini : schedule.minis) {
    double max_cost = 0, sum_cost = 0;
    for (const auto& rank : mini.ranks) {
      max_cost = std::max(max_cost, rank.cost);
      sum_cost += rank.cost;
      int64_t rank_samples = 0;
      for (const auto& m : rank.micros) {
        st.micros++;
        st.max_micro_tokens = std::max(st.max_micro_tokens, m.tokens);
        int64_t t_max = 0;
        for (int64_t i : m.samples) t_max = std::max(t_max, samples[i].tokens);
        padded_total += static_cast<double>(t_max) * static_cast<double>(m.samples.size());
        padded_pad +=
            static_cast<double>(t_max) * static_cast<double>(m.samples.size()) - static_cast<double>(m.tokens);
        packed_total += static_cast<double>(m.tokens);
        packed_slots += static_cast<double>(m.samples.size());
        rank_samples += static_cast<int64_t>(m.samples.size());
      }
      if (o.max_tokens_per_micro) {
        st.micros_lower_bound += (rank.tokens + *o.max_tokens_per_micro - 1) / *o.max_tokens_per_micro;
      } else {
        st.micros_lower_bound += (rank_samples + *o.micro_batch_size - 1) / *o.micro_batch_size;
      }
    }
    const double mean = sum_cost / static_cast<double>(mini.ranks.size());
    if (mean > 0) st.balance = std::max(st.balance, max_cost / mean);
  }
  st.padded_waste = padded_total > 0 ? padded_pad / padded_total : 0;
  st.packed_waste = packed_total > 0 ? packed_slots / packed_total : 0;
  return st;
}

}  // namespace tandem
