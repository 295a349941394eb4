// Subcommand entry points and their parsed arguments; main.cpp wires them to CLI11.
#pragma once

#include <cstdint>
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

struct BenchCommArgs {
  int64_t min_mib = 1;
  int64_t max_mib = 256;
  int64_t iters = 10;
};
int run_bench_comm(const BenchCommArgs& args, int rank, int world);

struct TrainArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  std::string resume;
};
int run_train(const TrainArgs& args, int argc, char** argv);

int run_ckpt_info(const std::string& path);
int run_ckpt_export_hf(const std::string& path, const std::string& out);

}  // namespace tandem::app
