// Checkpoint directories: each checkpoint is written under a temporary name, given a manifest of
// its files' sizes and checksums, fsynced, renamed to checkpoints/step_NNNNNN, and only then does
// `latest` (a file, replaced by rename) name it. A crash at any point leaves the previous complete
// checkpoint as `latest`; damage after the write is caught by the manifest when resolving one to
// load. The contents are the trainer's business; this file guarantees atomicity, integrity,
// discovery and pruning.
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
  static std::string step_name(int64_t step);    // step_000042
  std::string staging_path(int64_t step) const;  // where writers put files before commit

  // Creates an empty staging directory (removing a stale one from a crashed attempt).
  std::string begin(int64_t step) const;
  // Writes the manifest (MANIFEST.json) and the COMPLETE marker, fsyncs every file in the staging
  // directory, renames it into place, points `latest` at it, then prunes to keep_last (0 keeps
  // all). Returns the final path.
  std::string commit(int64_t step) const;

  std::optional<std::string> latest() const;     // the last committed checkpoint, if any (unverified)
  std::vector<int64_t> committed_steps() const;  // ascending

  // A checkpoint to load and what the caller must tell the user about the choice.
  struct Choice {
    std::optional<std::string> path;    // nullopt: nothing to load (a fresh start)
    std::vector<std::string> warnings;  // damaged checkpoints skipped; a checkpoint without manifest
  };

  // The newest committed checkpoint that verifies against its manifest, walking back from
  // `latest`; one without a manifest (an older tandem's) is taken, with a warning. nullopt when
  // there is no committed checkpoint; UserError naming every damaged file when none verifies.
  Choice newest_intact() const;

  // --resume: "auto" -> newest_intact() of run_dir; anything else is a checkpoint directory path,
  // which must exist, be complete and verify (UserError naming the damaged file otherwise).
  // `option` is the flag the user gave it with, which the errors name (eval / generate: --checkpoint).
  static Choice resolve(const std::string& run_dir, const std::string& resume, const std::string& option = "--resume");
  // A committed checkpoint directory carries this marker file, written last before the rename.
  static constexpr const char* kCompleteMarker = "COMPLETE";

 private:
  std::string run_dir_;
  int64_t keep_last_;
};

}  // namespace tandem
