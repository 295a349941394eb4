// The environment as a long-lived process (/bin/sh -c <env.command>) speaking JSON lines on
// stdin / stdout (docs/env_protocol.md): requests are pipelined, answers come in any order and
// echo their request id. A process that times out, crashes, answers garbage or prints a stray line
// fails every episode it held and is restarted; the run goes on.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <set>
#include <string>

#include "core/env/environment.h"
#include "runtime/child_process.h"

namespace tandem::env {

struct EnvProcessOptions {
  std::string command;
  // How long requests may wait while the process answers none of them: a request's clock starts
  // when it is sent or at the process's latest answer, whichever is later, so a slow process
  // that works through many pipelined requests in turn is not taken for a hung one.
  double timeout_s = 60.0;
  bool forward_stderr = true;  // copy the process's stderr to ours (a tail is kept for messages)
};

class EnvProcess : public Environment {
 public:
  // Starts the process and exchanges hello. Throws UserError (naming the command and what went
  // wrong, with the tail of its stderr) when it cannot start or its hello is missing or malformed:
  // that is a recipe or environment bug, not a failed episode.
  explicit EnvProcess(EnvProcessOptions options);
  ~EnvProcess() override;

  const EnvHello& hello() const override { return hello_; }
  void reset(const std::string& episode, const nlohmann::json& row, uint64_t seed) override;
  void step(const std::string& episode, const StepInput& input) override;
  void close(const std::string& episode) override;
  std::vector<EnvEvent> poll(std::chrono::milliseconds wait) override;
  size_t pending() const override { return pending_.size(); }
  int64_t restarts() const override { return restarts_; }

  pid_t child_pid() const { return child_.pid(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    std::string episode;  // "" for close
    bool reset = false;
    Clock::time_point deadline;
  };

  // Starts the child and waits for its hello (throws UserError on failure).
  EnvHello start_and_greet();
  void send(int64_t id, Pending pending, const std::string& line);
  // Reads what is there; returns false when stdout reached EOF.
  bool read_out();
  // Drains stderr, writes what waits, reads stdout (open: not at EOF) and takes its lines; false
  // when a breach in them restarted the process.
  bool exchange(bool& open);
  // Turns the complete lines read so far into events (or fails them all on a protocol breach);
  // returns false when it failed them (the process was restarted).
  bool take_lines();
  // Fails every episode the process held (pending or open), restarts it and re-greets.
  void fail_all(const std::string& why);
  // Before a reset while the process holds nothing: one that ended between steps (a crash in
  // close, an OOM kill) is restarted now, not found dead after the new resets were sent to it.
  void restart_if_ended();
  bool holds_nothing() const;  // no open episode, no request but closes waiting
  void restart();
  std::string describe(const std::string& what) const;
  Clock::duration timeout() const;              // timeout_s
  Clock::time_point deadline_from_now() const;  // now + timeout_s: when an answer sent now is due

  EnvProcessOptions options_;
  runtime::ChildProcess child_;
  EnvHello hello_;
  int64_t next_id_ = 0;
  int64_t restarts_ = 0;
  Clock::time_point last_answer_;       // when the process last answered (or was started)
  std::map<int64_t, Pending> pending_;  // request id -> what it was for
  std::set<std::string> open_;          // episodes reset and not closed (the process holds their state)
  std::deque<EnvEvent> ready_;          // events produced but not yet returned by poll()
  std::string out_buffer_;
  std::string write_buffer_;
};

}  // namespace tandem::env
