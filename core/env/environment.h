// What the episode runner drives: an environment with many episodes in flight, asked
// asynchronously (reset / step) and answering in any order (poll). Two kinds: a process speaking
// the JSON-line protocol (env_process.h) and a built-in one run in this process (builtin_envs.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/env/protocol.h"

namespace tandem::env {

// One answer for one episode, or its failure.
struct EnvEvent {
  std::string episode;
  bool reset = false;  // answers a reset (else a step)
  EnvAnswer answer;    // meaningful when !failure
  // Set when the episode failed outside its own answer: the process timed out, crashed, answered
  // garbage or printed a stray line (and was restarted), or the episode was unknown to it.
  std::optional<std::string> failure;
};

class Environment {
 public:
  virtual ~Environment() = default;
  virtual const EnvHello& hello() const = 0;
  // An episode id is unique for the environment's life. Each reset / step gets exactly one event.
  virtual void reset(const std::string& episode, const nlohmann::json& row, uint64_t seed) = 0;
  virtual void step(const std::string& episode, const StepInput& input) = 0;
  // The episode is over (done, failed or capped): the environment may drop its state. No event.
  virtual void close(const std::string& episode) = 0;
  // The events that are ready, waiting up to `wait` for the first one.
  virtual std::vector<EnvEvent> poll(std::chrono::milliseconds wait) = 0;
  // reset / step requests not yet answered.
  virtual size_t pending() const = 0;
  // Times the environment was restarted after a failure, since it started.
  virtual int64_t restarts() const { return 0; }
};

}  // namespace tandem::env
