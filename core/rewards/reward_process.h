// The `command` reward: a long-lived child process (/bin/sh -c <command>) that reads one JSON
// request per sample on stdin and answers one JSON line each on stdout, bounded by a timeout.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/rewards/reward_fn.h"
#include "runtime/child_process.h"

namespace tandem::rewards {

// Protocol, one line each way per sample, in order:
//   request  {"answer": "...", "index": 7, "prompt": "...", "response": "..."}
//   answer   {"index": 7, "reward": 0.5}   (other keys are ignored; the reward must be a finite number)
// The answer echoes its request's index, so a stray line (output at start, two answers to one
// request) is an error the moment it is read, never a reward silently paired with the wrong sample.
// Requests are pipelined: the whole batch is written while answers are read, so a child may
// answer line by line or read several lines first.
struct RewardProcessOptions {
  std::string command;
  double timeout_s = 30.0;     // the longest wait for any one answer line
  bool forward_stderr = true;  // copy the child's stderr to ours as it arrives (it is captured too)
};

// Not thread-safe: one caller at a time (the trainer scores from one thread).
class RewardProcess : public RewardFn {
 public:
  // Starts the child. Throws UserError for an empty command, a timeout that is not > 0, or a
  // failed spawn. Ignores SIGPIPE process-wide (if it still has its default action) so that
  // writing to a dead child is an error, not the end of the trainer; the child gets the default.
  explicit RewardProcess(RewardProcessOptions options);
  // Closes the child's stdin, gives it a moment to exit, then kills its process group and reaps it.
  ~RewardProcess() override;
  RewardProcess(const RewardProcess&) = delete;
  RewardProcess& operator=(const RewardProcess&) = delete;

  // Throws UserError naming the sample index, the command and what happened when the child exits
  // or closes its stdout, stays silent past timeout_s, or answers something malformed (with the
  // tail of its stderr). The child is then killed and reaped; the next call starts a fresh one.
  std::vector<double> score(const std::vector<RewardInput>& inputs) override;
  std::string name() const override { return "command"; }

  // The running child's pid (also its process group id), or -1 when none runs.
  pid_t child_pid() const { return child_.pid(); }

 private:
  void start();
  [[noreturn]] void fail(int64_t sample_index, const std::string& what, bool child_ended);
  void check_unsolicited(int64_t first_index);

  RewardProcessOptions options_;
  runtime::ChildProcess child_;
  std::string out_buffer_;
};

}  // namespace tandem::rewards
