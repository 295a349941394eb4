// Checkpoint directories: each checkpoint is written under a temporary name, fsynced, renamed
// to checkpoints/step_NNNNNN, and only then does `latest` (a file, replaced by rename) name it.
// A crash at any point leaves the previous complete checkpoint as `latest`. The contents are
// the trainer's business; this file only guarantees atomicity, discovery and pruning.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

class CheckpointDir {
 public:
  CheckpointDir(std::string run_dir, int64_t keep_last);

  std::string root() const { return run_dir_ + "/checkpoints"; }
  static std::string step_name(int64_t step);      // step_000042
  std::string staging_path(int64_t step) const;    // where writers put files before commit

  // Creates an empty staging directory (removing a stale one from a crashed attempt).
  std::string begin(int64_t step) const;
  // fsyncs every file in the staging directory, renames it into place, points `latest` at it,
  // then prunes to keep_last (0 keeps all). Returns the final path.
  std::string commit(int64_t step) const;

  std::optional<std::string> latest() const;       // the last committed checkpoint, if any
  std::vector<int64_t> committed_steps() const;    // ascending

  // --resume: "auto" -> latest in run_dir (nullopt when none: a fresh start); anything else is a
  // checkpoint directory path, which must exist and be complete (UserError otherwise).
  static std::optional<std::string> resolve(const std::string& run_dir, const std::string& resume);
  // A committed checkpoint directory carries this marker file, written last before the rename.
  static constexpr const char* kCompleteMarker = "COMPLETE";

 private:
  std::string run_dir_;
  int64_t keep_last_;
};

}  // namespace tandem
