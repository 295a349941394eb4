// SharedEnvironment: events and the greeting travel as JSON text in a byte tensor.
#include "core/env/shared_environment.h"

#include <torch/torch.h>

#include <cstring>

#include "common/error.h"

namespace tandem::env {

namespace {

using ojson = nlohmann::ordered_json;

std::string encode_events(const std::vector<EnvEvent>& events, int64_t restarts) {
  ojson list = ojson::array();
  for (const auto& e : events) {
    ojson a{{"messages", e.answer.messages}, {"reward", e.answer.reward}, {"done", e.answer.done}};
    a["error"] = e.answer.error ? ojson(*e.answer.error) : ojson(nullptr);
    ojson j{{"episode", e.episode}, {"reset", e.reset}, {"answer", a}};
    j["failure"] = e.failure ? ojson(*e.failure) : ojson(nullptr);
    list.push_back(std::move(j));
  }
  return ojson{{"events", list}, {"restarts", restarts}}.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::vector<EnvEvent> decode_events(const std::string& text, int64_t& restarts) {
  const ojson j = ojson::parse(text);
  restarts = j["restarts"].get<int64_t>();
  std::vector<EnvEvent> out;
  for (const auto& e : j["events"]) {
    EnvEvent ev;
    ev.episode = e["episode"].get<std::string>();
    ev.reset = e["reset"].get<bool>();
    if (!e["failure"].is_null()) ev.failure = e["failure"].get<std::string>();
    const auto& a = e["answer"];
    ev.answer.messages = a["messages"];
    ev.answer.reward = a["reward"].get<double>();
    ev.answer.done = a["done"].get<bool>();
    if (!a["error"].is_null()) ev.answer.error = a["error"].get<std::string>();
    out.push_back(std::move(ev));
  }
  return out;
}

}  // namespace

SharedEnvironment::SharedEnvironment(std::unique_ptr<Environment> inner, std::vector<parallel::Communicator*> groups)
    : inner_(std::move(inner)), groups_(std::move(groups)) {
  bool leader = true;
  for (auto* g : groups_) leader = leader && g->rank() == 0;
  if (leader != (inner_ != nullptr))
    throw std::logic_error("SharedEnvironment: the environment must live on the leader only");
  const std::string hello = share(inner_ ? hello_answer(0, inner_->hello()) : "");
  std::string problem;
  if (!read_hello(nlohmann::ordered_json::parse(hello), hello_, problem))
    throw UserError("environment hello: " + problem);
}

std::string SharedEnvironment::share(std::string text) {
  for (auto* g : groups_) {
    if (g->size() == 1) continue;
    const torch::TensorOptions bytes = torch::TensorOptions().dtype(torch::kUInt8).device(g->device());
    torch::Tensor size = torch::tensor({static_cast<int64_t>(text.size())}, torch::kInt64).to(g->device());  // (1)
    g->broadcast(size, 0);
    const int64_t n = size.cpu().item<int64_t>();
    torch::Tensor data = torch::zeros({std::max<int64_t>(n, 1)}, bytes);  // (n)
    if (g->rank() == 0 && n > 0) data.copy_(torch::from_blob(text.data(), {n}, torch::kUInt8).to(g->device()));
    g->broadcast(data, 0);
    const torch::Tensor host = data.cpu();
    text.assign(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), static_cast<size_t>(n));
  }
  return text;
}

void SharedEnvironment::reset(const std::string& episode, const nlohmann::json& row, uint64_t seed) {
  pending_.insert(episode);
  if (inner_) inner_->reset(episode, row, seed);
}

void SharedEnvironment::step(const std::string& episode, const StepInput& input) {
  pending_.insert(episode);
  if (inner_) inner_->step(episode, input);
}

void SharedEnvironment::close(const std::string& episode) {
  if (inner_) inner_->close(episode);
}

std::vector<EnvEvent> SharedEnvironment::poll(std::chrono::milliseconds wait) {
  const std::string text = share(inner_ ? encode_events(inner_->poll(wait), inner_->restarts()) : "");
  std::vector<EnvEvent> events = decode_events(text, restarts_);
  for (const auto& e : events) pending_.erase(e.episode);
  return events;
}

}  // namespace tandem::env
