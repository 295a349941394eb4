// `tandem bench schedule`: the scheduler on a file of sequence lengths, printed as one JSON
// object, with plain Karmarkar-Karp's balance beside ours for comparison.
#include "apps/commands.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>

#include "common/error.h"
#include "core/batch/schedule.h"

namespace tandem::app {

namespace {

std::vector<int64_t> read_lengths(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError(path + ": cannot open lengths file");
  std::vector<int64_t> lengths;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(line, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || line.find_first_not_of(" \t\r", used) != std::string::npos)
      throw UserError(path + ":" + std::to_string(n) + ": expected one integer length, got '" + line + "'");
    if (v < 1) throw UserError(path + ":" + std::to_string(n) + ": length must be >= 1, got " + std::to_string(v));
    lengths.push_back(v);
  }
  if (lengths.empty()) throw UserError(path + ": no lengths (one integer per line expected)");
  return lengths;
}

// Median of several runs: one build takes milliseconds and this machine is noisy.
template <class F>
double median_ms(F&& f) {
  std::vector<double> ms;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int run_bench_schedule(const BenchScheduleArgs& a) {
  if (a.dp < 1) throw UserError("--dp must be >= 1, got " + std::to_string(a.dp));
  if (a.group_size < 1) throw UserError("--group-size must be >= 1");
  if ((a.micro_batch_size > 0) == (a.max_tokens_per_micro > 0))
    throw UserError("give exactly one of --micro-batch-size or --max-tokens-per-micro (> 0)");
  const std::vector<int64_t> lengths = read_lengths(a.lengths_path);
  std::vector<SampleCost> samples;
  for (size_t i = 0; i < lengths.size(); ++i)
    samples.push_back({lengths[i], lengths[i], static_cast<int64_t>(i) / a.group_size});

  ScheduleOptions o;
  o.dp = a.dp;
  o.num_mini_batches = a.num_mini_batches;
  if (a.micro_batch_size > 0) o.micro_batch_size = a.micro_batch_size;
  if (a.max_tokens_per_micro > 0) o.max_tokens_per_micro = a.max_tokens_per_micro;
  o.keep_groups = a.keep_groups;
  o.cost_model = a.cost == "workload" ? CostModel::kWorkload : CostModel::kTokens;
  o.attn_coef = 1.0 / (12.0 * static_cast<double>(a.hidden_size));

  ScheduleOptions kk = o;
  kk.refine_balance = false;
  Schedule schedule, kk_schedule;
  const double ms = median_ms([&] { schedule = build_schedule(samples, o); });
  const double kk_ms = median_ms([&] { kk_schedule = build_schedule(samples, kk); });
  const ScheduleStats st = schedule_stats(schedule, samples, o);
  const ScheduleStats kk_st = schedule_stats(kk_schedule, samples, kk);

  nlohmann::json out;
  out["samples"] = samples.size();
  out["dp"] = a.dp;
  out["num_mini_batches"] = a.num_mini_batches;
  out["keep_groups"] = a.keep_groups;
  out["cost"] = a.cost;
  out["balance"] = st.balance;
  out["kk_balance"] = kk_st.balance;
  out["micros"] = st.micros;
  out["micros_lower_bound"] = st.micros_lower_bound;
  out["max_micro_tokens"] = st.max_micro_tokens;
  out["padded_waste"] = st.padded_waste;
  out["packed_waste"] = st.packed_waste;
  out["schedule_ms"] = ms;
  out["kk_schedule_ms"] = kk_ms;
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace tandem::app
