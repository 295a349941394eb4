// `tandem bench ablate`: runs named conditions of `tandem train` (recipe overrides) as fresh
// mpirun processes in ABBA order and attributes training throughput to each switch, as speedups
// over condition B paired run by run. Prints one JSON object.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "apps/bench_util.h"
#include "apps/commands.h"
#include "common/error.h"
#include "core/config/config.h"
#include "core/run/metrics.h"
#include "runtime/blas_kernel.h"
#include "runtime/cpu_threads.h"
#include "runtime/host_memory.h"

extern char** environ;

namespace tandem::app {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct Condition {
  std::string name;
  std::vector<std::string> overrides;
  std::string unit;        // what "tokens" counts for this condition's recipe
  std::string metric_key;  // the metrics.jsonl key it is read from
};

struct RunResult {
  double tokens_per_s = 0, mean_step_s = 0, wall_s = 0;
};

// Keys the bench sets itself on every run; a user value would silently change what is measured.
const std::set<std::string> kBenchKeys = {"run.steps", "run.name", "run.out_dir", "run.save_every", "run.log_every"};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) out.push_back(s.substr(start, i - start)), start = i + 1;
  return out;
}

void check_override(const std::string& kv, const std::string& where) {
  const size_t eq = kv.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UserError(where + ": '" + kv + "' is not KEY=VALUE (a recipe key such as train.micro_batch_size=4)");
  const std::string key = kv.substr(0, eq);
  if (kBenchKeys.count(key))
    throw UserError(where + ": " + key +
                    " is set by bench ablate itself (run.steps = --warmup-steps + --steps; "
                    "run.name, run.out_dir, run.save_every, run.log_every per run); drop it");
}

// NAME=K1=V1;K2=V2 (the list may be empty: "B="). Names become file names, so they are plain.
std::vector<Condition> parse_conditions(const std::vector<std::string>& specs) {
  std::vector<Condition> out;
  std::set<std::string> seen;
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    const std::string name = spec.substr(0, eq);
    if (eq == std::string::npos || name.empty())
      throw UserError("--condition '" + spec + "': want NAME=OVERRIDES (e.g. B= or R=tracks.ar.algo.old_logp=reuse)");
    for (char c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-')
        throw UserError("--condition '" + spec + "': the name '" + name + "' may hold only letters, digits, _ and -");
    if (!seen.insert(name).second) throw UserError("--condition " + name + " is given twice; names must be unique");
    Condition c;
    c.name = name;
    for (const std::string& kv : split(spec.substr(eq + 1), ';')) {
      if (kv.empty()) continue;  // "B=" and a trailing ';'
      check_override(kv, "--condition " + name);
      c.overrides.push_back(kv);
    }
    out.push_back(std::move(c));
  }
  if (!seen.count("B"))
    throw UserError("bench ablate needs a baseline condition named B (e.g. --condition B=); got " +
                    std::to_string(out.size()) + " condition(s)");
  return out;
}

std::string measurement_scope(int64_t steps, int64_t warmup, int64_t runs) {
  if (steps == 1 && warmup == 0) return "first_step";
  if (warmup >= 1 && runs >= 2) return "steady_state";
  if (warmup == 0) return "includes_warmup";
  return "single_run";
}

// ABBA: round 1 in the given order, round 2 reversed, round 3 given, ... (condition, run index).
std::vector<std::pair<size_t, int64_t>> abba_order(size_t conditions, int64_t runs) {
  std::vector<std::pair<size_t, int64_t>> order;
  for (int64_t r = 1; r <= runs; ++r)
    for (size_t k = 0; k < conditions; ++k) order.emplace_back(r % 2 == 1 ? k : conditions - 1 - k, r);
  return order;
}

std::string self_exe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot read /proc/self/exe: " + ec.message());
  return p.string();
}

// The launcher's path: as given when it names a file, else searched on PATH (as a shell would),
// so a missing launcher is refused before anything runs rather than failing the first run.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), X_OK) != 0) throw UserError("--mpirun: " + name + " is not an executable file");
    return name;
  }
  const char* path = std::getenv("PATH");
  for (const std::string& dir : split(path ? path : "", ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return candidate;
  }
  throw UserError("--mpirun: '" + name + "' is not on PATH; install Open MPI or give --mpirun /path/to/mpirun");
}

// The running child's process group, for forwarding Ctrl-C / SIGTERM to mpirun and its ranks.
volatile sig_atomic_t g_child_group = 0;
volatile sig_atomic_t g_interrupted = 0;

void forward_signal(int sig) {
  g_interrupted = sig;
  if (g_child_group > 0) kill(-g_child_group, sig);
}

struct SignalForwarding {
  struct sigaction old_int {
  }, old_term{}, old_hup{};
  SignalForwarding() {
    struct sigaction sa {};
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &sa, &old_hup);
  }
  ~SignalForwarding() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGHUP, &old_hup, nullptr);
  }
};

struct Exit {
  int status = 0;  // waitpid status
  bool timed_out = false;
  double wall_s = 0;
};

// Runs argv (no shell: values reach the child verbatim) with stdin from /dev/null and stdout +
// stderr into log_path, in its own process group so a timeout can end mpirun and its ranks
// together (SIGTERM, then SIGKILL after 10 s). The environment passes on unchanged.
Exit run_logged(const std::vector<std::string>& argv, const std::string& log_path, double timeout_s) {
  std::vector<char*> cargv;
  for (const auto& s : argv) cargv.push_back(const_cast<char*>(s.c_str()));
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  const auto t0 = Clock::now();
  const int rc = posix_spawn(&pid, cargv[0], &files, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  g_child_group = pid;
  Exit e;
  bool termed = false;
  Clock::time_point term_at;
  for (;;) {
    const pid_t w = waitpid(pid, &e.status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) break;
    const double t = seconds_since(t0);
    if (!termed && timeout_s > 0 && t > timeout_s) {
      e.timed_out = true, termed = true, term_at = Clock::now();
      kill(-pid, SIGTERM);
    } else if (termed && seconds_since(term_at) > 10) {
      kill(-pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  g_child_group = 0;
  e.wall_s = seconds_since(t0);
  return e;
}

std::string describe_exit(const Exit& e, double timeout_s) {
  std::ostringstream limit;
  limit << timeout_s;
  if (e.timed_out) return "ran past --timeout-s " + limit.str() + " and was killed";
  if (WIFEXITED(e.status)) return "exited with status " + std::to_string(WEXITSTATUS(e.status));
  if (WIFSIGNALED(e.status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(e.status));
  return "ended abnormally";
}

std::string last_lines(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > n) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += "  | " + l + "\n";
  return out.empty() ? "  (the log is empty)\n" : out;
}

// Tokens/s of steps warmup+1 .. warmup+steps: their summed `key` over their summed time/step_s.
RunResult measure(const std::string& metrics_path, const std::string& key, int64_t warmup, int64_t steps) {
  std::map<int64_t, MetricMap> by_step;
  for (auto& [step, m] : read_metrics_jsonl(metrics_path)) by_step[step] = std::move(m);
  double tokens = 0, seconds = 0;
  for (int64_t s = warmup + 1; s <= warmup + steps; ++s) {
    const auto it = by_step.find(s);
    if (it == by_step.end()) throw std::runtime_error(metrics_path + " has no line for step " + std::to_string(s));
    const auto tok = it->second.find(key), sec = it->second.find("time/step_s");
    if (tok == it->second.end() || sec == it->second.end())
      throw std::runtime_error(metrics_path + ": step " + std::to_string(s) + " lacks " + key + " or time/step_s");
    tokens += tok->second, seconds += sec->second;
  }
  if (!(seconds > 0)) throw std::runtime_error(metrics_path + ": the measured steps took no time");
  RunResult r;
  r.tokens_per_s = tokens / seconds;
  r.mean_step_s = seconds / static_cast<double>(steps);
  return r;
}

// The overrides every run of a condition gets, bench-owned keys first.
std::vector<std::string> run_overrides(const BenchAblateArgs& a, const Condition& c, const std::string& run_name,
                                       const std::string& out_dir) {
  const int64_t total = a.warmup_steps + a.steps;
  std::vector<std::string> o = {"run.steps=" + std::to_string(total), "run.name=" + run_name, "run.out_dir=" + out_dir,
                                "run.save_every=0", "run.log_every=" + std::to_string(total)};
  o.insert(o.end(), a.overrides.begin(), a.overrides.end());
  o.insert(o.end(), c.overrides.begin(), c.overrides.end());
  return o;
}

void check_args(const BenchAblateArgs& a) {
  if (a.config_path.empty())
    throw UserError("bench ablate: --config FILE is required (the recipe every condition runs)");
  if (a.runs < 1) throw UserError("--runs must be >= 1 (runs per condition; >= 2 for a speedup)");
  if (a.steps < 1) throw UserError("--steps must be >= 1 (measured steps per run)");
  if (a.warmup_steps < 0) throw UserError("--warmup-steps must be >= 0");
  if (a.np < 1) throw UserError("--np must be >= 1 (ranks per run)");
  if (!(a.timeout_s > 0)) throw UserError("--timeout-s must be > 0");
  if (a.conditions.empty()) throw UserError("bench ablate: give at least --condition B= (the baseline)");
  for (const auto& kv : a.overrides) check_override(kv, "--set");
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (std::getenv(v))
      throw UserError("bench ablate launches mpirun itself; run it as a plain process, not under mpirun");
}

// Every condition's recipe loads and validates at --np ranks before the first run starts.
// Returns the baseline's resolved recipe (for the threads setting in the output).
Config check_recipes(const BenchAblateArgs& a, std::vector<Condition>& conditions, const std::string& out_dir) {
  Config baseline;
  Condition plain;  // the recipe and --set alone load, so their errors are not blamed on a condition
  load_config(a.config_path, run_overrides(a, plain, "B_1", out_dir));
  for (Condition& c : conditions) {
    Config config;
    try {
      config = load_config(a.config_path, run_overrides(a, c, c.name + "_1", out_dir));
      validate(config, a.np);
    } catch (const UserError& e) {
      throw UserError("condition " + c.name + ": " + e.what());
    }
    if (config.tracks.ar.enabled)
      c.unit = "action_tokens", c.metric_key = "ar/train/action_tokens";
    else
      c.unit = "image_samples", c.metric_key = "image/rollout/samples";
    if (c.name == "B") baseline = config;
  }
  return baseline;
}

Json summary_of(const std::vector<double>& v) {
  double sum = 0, lo = v.front(), hi = v.front();
  for (double x : v) sum += x, lo = std::min(lo, x), hi = std::max(hi, x);
  return Json{{"mean", sum / static_cast<double>(v.size())}, {"min", lo}, {"max", hi}, {"runs", v}};
}

Json condition_json(const Condition& c, const Condition& base, const std::vector<RunResult>& runs,
                    const std::vector<RunResult>& base_runs) {
  std::vector<double> tps, step_s, wall_s;
  for (const auto& r : runs) tps.push_back(r.tokens_per_s), step_s.push_back(r.mean_step_s), wall_s.push_back(r.wall_s);
  Json j;
  j["overrides"] = c.overrides;
  j["unit"] = c.unit;
  j["tokens_per_s"] = summary_of(tps);
  j["step_s"] = step_s;
  j["wall_s"] = wall_s;
  if (c.unit != base.unit) {
    j["speedup_vs_B"] = nullptr;
    j["speedup_refused"] = "this condition counts " + c.unit + " and B counts " + base.unit + ": not comparable";
  } else if (runs.size() < 2) {
    j["speedup_vs_B"] = nullptr;
    j["speedup_refused"] =
        "one run per condition: a single unpaired run does not separate the switch from "
        "run-to-run noise; use --runs >= 2";
  } else {
    std::vector<double> pairs;
    double log_sum = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      pairs.push_back(runs[i].tokens_per_s / base_runs[i].tokens_per_s);
      log_sum += std::log(pairs.back());
    }
    j["speedup_vs_B"] = Json{{"geomean", std::exp(log_sum / static_cast<double>(pairs.size()))}, {"pairs", pairs}};
  }
  return j;
}

}  // namespace

int run_bench_ablate(const BenchAblateArgs& a) {
  check_args(a);
  std::vector<Condition> conditions = parse_conditions(a.conditions);
  const std::string mpirun = find_program(a.mpirun);
  if (!a.out.empty() && fs::exists(a.out) && !fs::is_directory(a.out))
    throw UserError("--out " + a.out + " exists and is not a directory");
  // Recipes are checked against a placeholder directory first, so bad input creates nothing.
  const Config baseline = check_recipes(a, conditions, a.out.empty() ? "/tmp/tandem_ablate" : a.out);
  if (!a.out.empty())
    for (const Condition& c : conditions)
      for (int64_t i = 1; i <= a.runs; ++i)
        if (fs::exists(fs::path(a.out) / (c.name + "_" + std::to_string(i))))
          throw UserError("--out " + a.out + " already holds " + c.name + "_" + std::to_string(i) +
                          "; give a new or empty directory");

  torch::set_num_threads(1);
  const double gemm = gemm_gflops(2048, 3);  // before the runs, so nothing else competes with it

  std::string out_dir = a.out;
  if (out_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/tandem_ablate_XXXXXX";
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
    out_dir = pattern;
  }
  fs::create_directories(out_dir);
  out_dir = fs::absolute(out_dir).string();
  const bool remove_after = a.out.empty() && !a.keep;
  const std::string exe = self_exe();

  const auto order = abba_order(conditions.size(), a.runs);
  std::vector<std::vector<RunResult>> results(conditions.size(), std::vector<RunResult>(static_cast<size_t>(a.runs)));
  std::vector<std::string> order_names;
  SignalForwarding forwarding;
  for (size_t n = 0; n < order.size(); ++n) {
    const Condition& c = conditions[order[n].first];
    const int64_t i = order[n].second;
    const std::string run_name = c.name + "_" + std::to_string(i);
    const std::string log = out_dir + "/" + run_name + ".log";
    order_names.push_back(run_name);
    std::vector<std::string> argv = {mpirun,
                                     "--allow-run-as-root",
                                     "--oversubscribe",
                                     "--bind-to",
                                     "none",
                                     "-np",
                                     std::to_string(a.np),
                                     exe,
                                     "train",
                                     "--config",
                                     a.config_path};
    for (const auto& kv : run_overrides(a, c, run_name, out_dir)) argv.push_back("--set"), argv.push_back(kv);
    std::cerr << "bench ablate: run " << n + 1 << "/" << order.size() << " " << run_name << " ..." << std::flush;
    const Exit e = run_logged(argv, log, a.timeout_s);
    if (g_interrupted) {
      std::cerr << "\nbench ablate: interrupted (" << strsignal(g_interrupted) << "); runs so far are in " << out_dir
                << "\n";
      return 128 + g_interrupted;
    }
    const bool ok = !e.timed_out && WIFEXITED(e.status) && WEXITSTATUS(e.status) == 0;
    std::string why;
    RunResult r;
    if (ok) {
      try {
        r = measure(out_dir + "/" + run_name + "/metrics.jsonl", c.metric_key, a.warmup_steps, a.steps);
      } catch (const std::exception& ex) {
        why = std::string("finished, but its metrics cannot be read: ") + ex.what();
      }
    } else {
      why = describe_exit(e, a.timeout_s);
    }
    if (!why.empty()) {
      std::cerr << "\nbench ablate: condition " << c.name << " run " << i << " " << why << "; log: " << log
                << " (the run directory " << out_dir << " is kept). Its last lines:\n"
                << last_lines(log, 20);
      return 1;
    }
    r.wall_s = e.wall_s;
    results[order[n].first][static_cast<size_t>(i - 1)] = r;
    std::cerr << " " << static_cast<int64_t>(std::lround(r.tokens_per_s)) << " " << c.unit << "/s, " << r.mean_step_s
              << " s/step, " << e.wall_s << " s wall\n";
  }

  size_t base = 0;
  while (conditions[base].name != "B") ++base;
  Json out;
  out["settings"] = {{"config", a.config_path},
                     {"set", a.overrides},
                     {"conditions", a.conditions},
                     {"np", a.np},
                     {"runs", a.runs},
                     {"steps", a.steps},
                     {"warmup_steps", a.warmup_steps},
                     {"out", remove_after ? Json(nullptr) : Json(out_dir)},
                     {"mpirun", mpirun},
                     {"timeout_s", a.timeout_s}};
  out["measurement_scope"] = measurement_scope(a.steps, a.warmup_steps, a.runs);
  out["order"] = order_names;
  out["unit"] = conditions[base].unit;
  out["blas"] = blas_description();
  out["host_memory"] = host_memory_description();
  out["cpus"] = describe(cpu_budget());
  out["run_threads"] = baseline.run.threads;  // 0: each rank takes its share of the CPUs
  out["gemm_gflops"] = gemm;
  out["gemm"] = "float32 torch.mm 2048^2, 1 thread, best of 3, measured before the runs";
  Json per;
  for (size_t k = 0; k < conditions.size(); ++k)
    per[conditions[k].name] = condition_json(conditions[k], conditions[base], results[k], results[base]);
  out["conditions"] = per;
  std::cout << out.dump(2) << std::endl;
  if (remove_after) {
    std::error_code ec;
    fs::remove_all(out_dir, ec);
  }
  return 0;
}

}  // namespace tandem::app
