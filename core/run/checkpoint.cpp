// POSIX durability: fsync each file, then the staging directory, rename, fsync the parent;
// `latest` is written to a temporary file and renamed over the old one.
#include "core/run/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/write_file.h"
#include "core/run/checkpoint_manifest.h"

namespace fs = std::filesystem;

namespace tandem {

namespace {

void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::optional<int64_t> parse_step(const std::string& name) {
  if (name.size() != 11 || name.rfind("step_", 0) != 0) return std::nullopt;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  return std::stoll(name.substr(5));
}

}  // namespace

CheckpointDir::CheckpointDir(std::string run_dir, int64_t keep_last)
    : run_dir_(std::move(run_dir)), keep_last_(keep_last) {}

std::string CheckpointDir::step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%06lld", static_cast<long long>(step));
  return buf;
}

std::string CheckpointDir::staging_path(int64_t step) const { return root() + "/." + step_name(step) + ".staging"; }

std::string CheckpointDir::begin(int64_t step) const {
  const fs::path staging = staging_path(step);
  fs::remove_all(staging);
  fs::create_directories(staging);
  return staging.string();
}

std::string CheckpointDir::commit(int64_t step) const {
  const fs::path staging = staging_path(step), final_path = fs::path(root()) / step_name(step);
  write_manifest(staging.string(), {kCompleteMarker});
  write_file_checked((staging / kCompleteMarker).string(), std::to_string(step) + "\n");
  for (const auto& e : fs::recursive_directory_iterator(staging))
    if (e.is_regular_file()) fsync_path(e.path());
  fsync_path(staging);
  fs::remove_all(final_path);  // a re-save of the same step (e.g. after resume) replaces it
  fs::rename(staging, final_path);
  fsync_path(root());
  const fs::path tmp = fs::path(root()) / ".latest.tmp";
  write_file_checked(tmp.string(), step_name(step) + "\n");
  fsync_path(tmp);
  fs::rename(tmp, fs::path(root()) / "latest");
  fsync_path(root());
  if (keep_last_ > 0) {
    std::vector<int64_t> steps = committed_steps();
    for (size_t i = 0; i + static_cast<size_t>(keep_last_) < steps.size(); ++i)
      if (steps[i] != step) fs::remove_all(fs::path(root()) / step_name(steps[i]));
  }
  return final_path.string();
}

std::vector<int64_t> CheckpointDir::committed_steps() const {
  std::vector<int64_t> steps;
  if (!fs::exists(root())) return steps;
  for (const auto& e : fs::directory_iterator(root())) {
    if (!e.is_directory()) continue;
    const auto s = parse_step(e.path().filename().string());
    if (s && fs::exists(e.path() / kCompleteMarker)) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<std::string> CheckpointDir::latest() const {
  std::ifstream in(fs::path(root()) / "latest");
  std::string name;
  if (in >> name) {
    const fs::path p = fs::path(root()) / name;
    if (fs::exists(p / kCompleteMarker)) return p.string();
  }
  // `latest` missing or stale (e.g. pruned by hand): fall back to the newest complete one.
  const auto steps = committed_steps();
  if (steps.empty()) return std::nullopt;
  return (fs::path(root()) / step_name(steps.back())).string();
}

CheckpointDir::Choice CheckpointDir::newest_intact() const {
  Choice choice;
  const auto newest = latest();
  if (!newest) return choice;
  // `latest` first, then every older committed step, newest first.
  std::vector<fs::path> candidates{*newest};
  const auto newest_step = parse_step(fs::path(*newest).filename().string());
  const auto steps = committed_steps();
  for (auto it = steps.rbegin(); it != steps.rend(); ++it)
    if (!newest_step || *it < *newest_step) candidates.push_back(fs::path(root()) / step_name(*it));
  std::vector<std::string> damaged;
  for (const fs::path& c : candidates) {
    const Integrity check = verify_manifest(c.string());
    if (check.status == Integrity::Status::kDamaged) {
      damaged.push_back(c.string() + " (" + check.detail + ")");
      continue;
    }
    for (const auto& d : damaged)
      choice.warnings.push_back("skipping damaged checkpoint " + d + "; using " + c.string());
    if (check.status == Integrity::Status::kUnverified)
      choice.warnings.push_back(c.string() + ": loading without verification: " + check.detail);
    choice.path = c.string();
    return choice;
  }
  std::string all;
  for (const auto& d : damaged) all += (all.empty() ? "" : "; ") + d;
  throw UserError("no intact checkpoint in " + root() + ", every one is damaged: " + all +
                  "; restore the damaged files or start a new run (set run.name)");
}

CheckpointDir::Choice CheckpointDir::resolve(const std::string& run_dir, const std::string& resume,
                                             const std::string& option) {
  if (resume.empty()) return {};
  if (resume == "auto") return CheckpointDir(run_dir, 0).newest_intact();
  // What to give instead: --resume auto walks back past a bad checkpoint, as a run directory does for
  // eval and generate.
  const std::string instead = option == "--resume" ? "--resume auto (which skips damaged ones)"
                                                   : option + " RUN_DIR (its newest intact checkpoint)";
  const fs::path p(resume);
  if (!fs::is_directory(p)) throw UserError(option + " " + resume + ": no such checkpoint directory");
  if (!fs::exists(p / kCompleteMarker))
    throw UserError(option + " " + resume + ": incomplete checkpoint (no " + kCompleteMarker +
                    " marker; it was interrupted while being written); use the previous one or " + instead);
  const Integrity check = verify_manifest(p.string());
  if (check.status == Integrity::Status::kDamaged)
    throw UserError(option + " " + resume + ": damaged checkpoint: " + check.detail + "; use an older checkpoint or " +
                    instead);
  Choice choice;
  if (check.status == Integrity::Status::kUnverified)
    choice.warnings.push_back(p.string() + ": loading without verification: " + check.detail);
  choice.path = p.string();
  return choice;
}

}  // namespace tandem
