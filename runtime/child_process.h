// A long-lived helper command (/bin/sh -c) on non-blocking pipes, in its own process group, with a
// guardian that kills the group when this process dies however it dies: the reward command and the
// environment processes both run this way, so no helper outlives its rank.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

namespace tandem::runtime {

// A dead child must surface as EPIPE from write(), not as SIGPIPE ending the trainer. Ignores
// SIGPIPE process-wide once, if it still has its default action (someone else's handler is kept).
void ignore_sigpipe_once();

// A child's output quoted on one line in a message: newlines become spaces, cut at `max` chars.
std::string one_line(const std::string& text, size_t max = 120);

// "exited with status 3", "was killed by signal 9 (Killed)".
std::string describe_status(int status);

// Not thread-safe: one owner drives it.
class ChildProcess {
 public:
  ChildProcess() = default;
  ~ChildProcess() { stop(false); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Starts `command` (stopping a running one first). `what` names it in errors, e.g.
  // "reward command 'python3 r.py'". Throws UserError when /bin/sh cannot be started.
  // `forward_stderr`: copy the child's stderr to ours as it arrives (a tail is kept either way).
  void start(const std::string& command, const std::string& what, bool forward_stderr);
  // Closes stdin (the child sees EOF); when `graceful`, waits up to `grace` for it to exit by
  // itself; then kills the whole group and reaps it. Returns how the child ended ("" when none ran).
  std::string stop(bool graceful, std::chrono::milliseconds grace = std::chrono::milliseconds(1000));

  bool running() const { return pid_ >= 0; }
  pid_t pid() const { return pid_; }  // also its process group id; -1 when none runs
  int in_fd() const { return in_fd_; }
  int out_fd() const { return out_fd_; }
  int err_fd() const { return err_fd_; }  // -1 once stderr reached EOF
  void close_stdin();

  // Reads what stderr holds now, keeping the last 4 KiB.
  void drain_stderr();
  // "; its stderr ends with: <last lines>" or "" when it printed nothing.
  std::string stderr_summary() const;

 private:
  pid_t pid_ = -1;
  int in_fd_ = -1;   // the child's stdin (we write)
  int out_fd_ = -1;  // the child's stdout (we read)
  int err_fd_ = -1;  // the child's stderr (we read)
  bool forward_stderr_ = true;
  std::string err_tail_;
};

}  // namespace tandem::runtime
