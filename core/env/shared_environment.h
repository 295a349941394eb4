// One environment for a model's tp and cp peers: generation is collective over them, so every peer
// must see the same answers at the same moment. The leader (rank 0 of each group) talks to the
// environment; each poll's events (and the greeting) are broadcast to the peers, so all of them
// make the same generator calls in the same order.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/env/environment.h"
#include "parallel/communicator.h"

namespace tandem::env {

class SharedEnvironment : public Environment {
 public:
  // `inner` is the environment on the leader and null on every other rank; `groups` are broadcast
  // over in order (tp, then cp): the leader is rank 0 of each. Collective: all peers construct it.
  SharedEnvironment(std::unique_ptr<Environment> inner, std::vector<parallel::Communicator*> groups);

  const EnvHello& hello() const override { return hello_; }
  void reset(const std::string& episode, const nlohmann::json& row, uint64_t seed) override;
  void step(const std::string& episode, const StepInput& input) override;
  void close(const std::string& episode) override;
  // Collective over the groups: the leader polls, everyone gets its events.
  std::vector<EnvEvent> poll(std::chrono::milliseconds wait) override;
  // reset / step requests without an event yet: counted alike on every peer.
  size_t pending() const override { return pending_.size(); }
  int64_t restarts() const override { return restarts_; }

 private:
  std::string share(std::string text);  // the leader's text on every peer

  std::unique_ptr<Environment> inner_;
  std::vector<parallel::Communicator*> groups_;
  EnvHello hello_;
  std::set<std::string> pending_;  // episodes with a reset / step not answered yet
  int64_t restarts_ = 0;
};

}  // namespace tandem::env
