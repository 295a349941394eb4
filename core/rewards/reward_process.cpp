// The external reward process: pipelined request/answer exchange under poll() with a per-answer
// deadline over a runtime::ChildProcess (which spawns, guards and reaps the command).
#include "core/rewards/reward_process.h"

#include <poll.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <sstream>
#include <system_error>

#include "common/error.h"

namespace tandem::rewards {

namespace {

using Clock = std::chrono::steady_clock;

std::string request_line(const RewardInput& in) {
  const nlohmann::json j{
      {"prompt", in.prompt}, {"response", in.response}, {"answer", in.answer}, {"index", in.sample_index}};
  // Responses are valid UTF-8 by the tokenizer's contract; replace rather than throw regardless.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// The reward in one answer line for the request with sample index `index`, or an explanation of
// what is wrong with it. The answer must echo its request's index: a stray line (printed at start,
// or a second answer to one request) then fails on the spot instead of shifting every later reward
// onto the wrong sample, whenever it arrives.
bool parse_answer(std::string line, int64_t index, double& reward, std::string& problem) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded()) {
    // Python's json.dumps writes NaN / Infinity, which are not JSON.
    const bool non_finite = line.find("NaN") != std::string::npos || line.find("Infinity") != std::string::npos;
    problem = non_finite ? "not JSON (NaN and Infinity are not JSON numbers; a reward must be finite)" : "not JSON";
  } else if (!j.is_object()) {
    problem = "not a JSON object";
  } else if (!j.contains("index") || !j["index"].is_number_integer()) {
    problem = "no integer \"index\" key (an answer echoes its request's index)";
  } else if (j["index"].get<int64_t>() != index) {
    problem = "the answer is for index " + std::to_string(j["index"].get<int64_t>()) + " but request " +
              std::to_string(index) +
              " was next: a line printed out of turn (an extra answer, or output before a "
              "request)";
  } else if (!j.contains("reward")) {
    problem = "no \"reward\" key";
  } else if (!j["reward"].is_number()) {
    problem = "\"reward\" is not a number";
  } else if (!std::isfinite(j["reward"].get<double>())) {
    problem = "\"reward\" is not finite";
  } else {
    reward = j["reward"].get<double>();
    return true;
  }
  problem = "answered '" + runtime::one_line(line) + "': " + problem +
            " (expected {\"index\": " + std::to_string(index) + ", \"reward\": <number>})";
  return false;
}

}  // namespace

RewardProcess::RewardProcess(RewardProcessOptions options) : options_(std::move(options)) {
  if (options_.command.empty()) throw UserError("reward command: the command is empty");
  if (!(options_.timeout_s > 0) || !std::isfinite(options_.timeout_s))
    throw UserError("reward command '" + options_.command + "': timeout_s must be a finite number > 0, got " +
                    std::to_string(options_.timeout_s));
  start();
}

RewardProcess::~RewardProcess() { child_.stop(true); }

void RewardProcess::start() {
  child_.start(options_.command, "reward command '" + options_.command + "'", options_.forward_stderr);
  out_buffer_.clear();
}

void RewardProcess::fail(int64_t sample_index, const std::string& what, bool child_ended) {
  std::string message = "reward command '" + options_.command + "' " + what;
  const std::string how = child_.stop(child_ended);
  if (child_ended) message += " (it " + how + ")";
  message += " at sample " + std::to_string(sample_index) + child_.stderr_summary();
  throw UserError(message);
}

void RewardProcess::check_unsolicited(int64_t first_index) {
  // Output left over from the previous batch (an extra line) would silently shift every reward
  // of this batch by one sample.
  char buf[4096];
  const ssize_t n = ::read(child_.out_fd(), buf, sizeof(buf));
  if (n > 0) out_buffer_.append(buf, static_cast<size_t>(n));
  if (!out_buffer_.empty())
    fail(first_index, "printed output before its request ('" + runtime::one_line(out_buffer_) + "')", false);
}

std::vector<double> RewardProcess::score(const std::vector<RewardInput>& inputs) {
  std::vector<double> rewards;
  if (inputs.empty()) return rewards;
  if (!child_.running()) start();
  check_unsolicited(inputs.front().sample_index);
  std::string pending;
  for (const auto& in : inputs) pending += request_line(in);
  size_t written = 0;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_s));
  auto deadline = Clock::now() + timeout;
  const auto current = [&] { return inputs[rewards.size()].sample_index; };

  while (rewards.size() < inputs.size()) {
    // Complete answer lines first: they may already be buffered.
    for (size_t nl; rewards.size() < inputs.size() && (nl = out_buffer_.find('\n')) != std::string::npos;) {
      double reward = 0;
      std::string problem;
      if (!parse_answer(out_buffer_.substr(0, nl), current(), reward, problem)) fail(current(), problem, false);
      out_buffer_.erase(0, nl + 1);
      rewards.push_back(reward);
      deadline = Clock::now() + timeout;
    }
    if (rewards.size() == inputs.size()) break;

    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      std::ostringstream secs;
      secs << options_.timeout_s;
      fail(current(), "timed out after " + secs.str() + " s waiting for a reward", false);
    }
    pollfd fds[3];
    nfds_t count = 0;
    fds[count++] = {child_.out_fd(), POLLIN, 0};
    const bool writing = child_.in_fd() >= 0 && written < pending.size();
    if (writing) fds[count++] = {child_.in_fd(), POLLOUT, 0};
    if (child_.err_fd() >= 0) fds[count++] = {child_.err_fd(), POLLIN, 0};
    const int ready = poll(fds, count, static_cast<int>(std::min<int64_t>(left + 1, 1 << 30)));
    if (ready < 0 && errno != EINTR) throw std::system_error(errno, std::generic_category(), "poll");
    if (ready <= 0) continue;

    child_.drain_stderr();
    if (writing && fds[1].revents != 0) {
      const ssize_t n = ::write(child_.in_fd(), pending.data() + written, pending.size() - written);
      if (n > 0) {
        written += static_cast<size_t>(n);
      } else if (n < 0 && errno == EPIPE) {
        // The child stopped reading; collect what it did answer, then the EOF below names the sample.
        child_.close_stdin();
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        throw std::system_error(errno, std::generic_category(), "write to reward command");
      }
    }
    if (fds[0].revents != 0) {
      char buf[8192];
      const ssize_t n = ::read(child_.out_fd(), buf, sizeof(buf));
      if (n > 0) {
        out_buffer_.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        // A final answer without its newline still counts as malformed output, not a silent loss.
        const std::string what =
            out_buffer_.empty() ? "closed its stdout before answering"
                                : "closed its stdout after a partial line '" + runtime::one_line(out_buffer_) + "'";
        fail(current(), what, true);
      }
    }
  }
  if (!out_buffer_.empty())
    fail(inputs.back().sample_index,
         "printed more lines than there were samples ('" + runtime::one_line(out_buffer_) + "')", false);
  if (written < pending.size()) fail(inputs.back().sample_index, "answered before reading every request", false);
  return rewards;
}

}  // namespace tandem::rewards
