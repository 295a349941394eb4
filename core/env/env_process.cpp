// The environment process client: pipelined JSON-line requests, answers matched by id under
// poll(), a deadline per request, and fail-all-and-restart on any protocol breach.
#include "core/env/env_process.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <sstream>
#include <system_error>

#include "common/error.h"

namespace tandem::env {

namespace {

std::string seconds(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

}  // namespace

EnvProcess::EnvProcess(EnvProcessOptions options) : options_(std::move(options)) {
  if (options_.command.empty()) throw UserError("tracks.ar.env.command: the command is empty");
  if (!(options_.timeout_s > 0) || !std::isfinite(options_.timeout_s))
    throw UserError("tracks.ar.env.timeout_s must be a finite number > 0, got " + seconds(options_.timeout_s));
  hello_ = start_and_greet();
}

EnvProcess::~EnvProcess() { child_.stop(true); }

EnvProcess::Clock::duration EnvProcess::timeout() const {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_s));
}

EnvProcess::Clock::time_point EnvProcess::deadline_from_now() const { return Clock::now() + timeout(); }

std::string EnvProcess::describe(const std::string& what) const {
  return "environment '" + options_.command + "' " + what;
}

EnvHello EnvProcess::start_and_greet() {
  child_.start(options_.command, describe(""), options_.forward_stderr);
  last_answer_ = Clock::now();
  out_buffer_.clear();
  write_buffer_.clear();
  const int64_t id = next_id_++;
  send(id, Pending{"", false, Clock::now()}, hello_request(id));
  pending_.erase(id);  // hello is awaited here, not by poll()
  const auto deadline = deadline_from_now();
  for (;;) {
    const size_t nl = out_buffer_.find('\n');
    if (nl != std::string::npos) {
      const std::string line = out_buffer_.substr(0, nl);
      out_buffer_.erase(0, nl + 1);
      int64_t got = -1;
      nlohmann::ordered_json parsed;
      std::string problem;
      EnvHello hello;
      if (!answer_id(line, got, parsed, problem) || got != id ||
          (problem.empty() && !read_hello(parsed, hello, problem))) {
        if (problem.empty())
          problem =
              "an answer for id " + std::to_string(got) + " where hello (id " + std::to_string(id) + ") was asked";
        child_.stop(false);
        throw UserError(
            describe("answered hello with '" + runtime::one_line(line) + "': " + problem + child_.stderr_summary()));
      }
      return hello;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      child_.stop(false);
      throw UserError(describe("did not answer hello within " + seconds(options_.timeout_s) +
                               " s (tracks.ar.env.timeout_s)" + child_.stderr_summary()));
    }
    pollfd fds[2] = {{child_.out_fd(), POLLIN, 0},
                     {child_.in_fd(), static_cast<short>(write_buffer_.empty() ? 0 : POLLOUT), 0}};
    if (::poll(fds, 2, static_cast<int>(std::min<int64_t>(left, 100))) < 0 && errno != EINTR)
      throw std::system_error(errno, std::generic_category(), "poll");
    child_.drain_stderr();
    send(-1, {}, "");  // flush
    if (!read_out()) {
      const std::string how = child_.stop(true);
      throw UserError(describe("ended before answering hello (it " + how + ")" + child_.stderr_summary()));
    }
  }
}

void EnvProcess::send(int64_t id, Pending pending, const std::string& line) {
  if (id >= 0) pending_[id] = std::move(pending);
  write_buffer_ += line;
  while (!write_buffer_.empty() && child_.in_fd() >= 0) {
    const ssize_t n = ::write(child_.in_fd(), write_buffer_.data(), write_buffer_.size());
    if (n > 0) {
      write_buffer_.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;  // the pipe is full: poll() writes the rest
    } else {
      child_.close_stdin();  // the child stopped reading: its EOF or a deadline surfaces in poll()
      write_buffer_.clear();
    }
  }
}

void EnvProcess::reset(const std::string& episode, const nlohmann::json& row, uint64_t seed) {
  if (holds_nothing()) restart_if_ended();
  const auto deadline = deadline_from_now();
  open_.insert(episode);
  const int64_t id = next_id_++;
  send(id, Pending{episode, true, deadline}, reset_request(id, episode, row, seed));
}

void EnvProcess::step(const std::string& episode, const StepInput& input) {
  if (!open_.count(episode)) {
    ready_.push_back(EnvEvent{episode, false, {}, "the environment does not hold this episode (it was restarted)"});
    return;
  }
  const auto deadline = deadline_from_now();
  const int64_t id = next_id_++;
  send(id, Pending{episode, false, deadline}, step_request(id, episode, input));
}

void EnvProcess::close(const std::string& episode) {
  if (!open_.erase(episode)) return;
  const int64_t id = next_id_++;
  const auto deadline = deadline_from_now();
  send(id, Pending{"", false, deadline}, close_request(id, episode));
}

bool EnvProcess::read_out() {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(child_.out_fd(), buf, sizeof(buf));
    if (n > 0) {
      out_buffer_.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    return false;
  }
}

void EnvProcess::fail_all(const std::string& why) {
  child_.stop(false);
  const std::string reason = describe(why) + child_.stderr_summary();
  std::set<std::string> failed;
  for (const auto& [id, p] : pending_)
    if (!p.episode.empty() && failed.insert(p.episode).second)
      ready_.push_back(EnvEvent{p.episode, p.reset, {}, reason});
  for (const auto& e : open_)
    if (failed.insert(e).second) ready_.push_back(EnvEvent{e, false, {}, reason});
  pending_.clear();
  open_.clear();
  restart();
}

bool EnvProcess::holds_nothing() const {
  if (!open_.empty()) return false;
  for (const auto& [id, p] : pending_)
    if (!p.episode.empty()) return false;
  return true;
}

bool EnvProcess::exchange(bool& open) {
  child_.drain_stderr();
  if (!write_buffer_.empty()) send(-1, {}, "");
  open = read_out();
  return take_lines();
}

void EnvProcess::restart_if_ended() {
  bool open = true;
  if (!exchange(open) || open) return;  // a breach restarted it, or it is alive
  child_.stop(true);
  pending_.clear();  // closes only (it held no episode)
  restart();
}

void EnvProcess::restart() {
  ++restarts_;
  const EnvHello again = start_and_greet();
  if (again.name != hello_.name || again.tools != hello_.tools || again.max_turns != hello_.max_turns ||
      again.stop != hello_.stop)
    throw UserError(describe("greeted differently after its restart (name, tools, max_turns or stop changed)"));
}

std::vector<EnvEvent> EnvProcess::poll(std::chrono::milliseconds wait) {
  const auto until = Clock::now() + wait;
  for (;;) {
    // Everything the process wrote so far counts before any deadline is judged: the caller may
    // not have polled for a while (a collective, a long decode), with the answers in the pipe.
    bool open = true;
    if (!exchange(open)) break;  // restarted: what `open` said was of the old process
    if (!ready_.empty()) break;
    if (!open) {
      const std::string partial =
          out_buffer_.empty() ? "" : " after a partial line '" + runtime::one_line(out_buffer_) + "'";
      const std::string how = child_.stop(true);
      fail_all("ended (it " + how + ")" + partial);
      break;
    }
    // The oldest deadline bounds the wait; its clock restarts at every answer (EnvProcessOptions).
    auto oldest = Clock::time_point::max();
    for (const auto& [id, p] : pending_) oldest = std::min(oldest, p.deadline);
    if (!pending_.empty()) oldest = std::max(oldest, last_answer_ + timeout());
    const auto now = Clock::now();
    if (oldest <= now) {
      fail_all("timed out: no answer within " + seconds(options_.timeout_s) + " s (tracks.ar.env.timeout_s)");
      break;
    }
    if (now >= until) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(std::min(until, oldest) - now).count() + 1;
    pollfd fds[3] = {{child_.out_fd(), POLLIN, 0},
                     {child_.in_fd(), static_cast<short>(write_buffer_.empty() ? 0 : POLLOUT), 0},
                     {child_.err_fd(), POLLIN, 0}};
    if (::poll(fds, 3, static_cast<int>(std::min<int64_t>(left, 1 << 30))) < 0 && errno != EINTR)
      throw std::system_error(errno, std::generic_category(), "poll");
  }
  std::vector<EnvEvent> out(std::make_move_iterator(ready_.begin()), std::make_move_iterator(ready_.end()));
  ready_.clear();
  return out;
}

bool EnvProcess::take_lines() {
  for (size_t nl; (nl = out_buffer_.find('\n')) != std::string::npos;) {
    std::string line = out_buffer_.substr(0, nl);
    out_buffer_.erase(0, nl + 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    int64_t id = -1;
    nlohmann::ordered_json parsed;
    std::string problem;
    if (!answer_id(line, id, parsed, problem)) {
      fail_all("answered '" + runtime::one_line(line) + "': " + problem);
      return false;
    }
    const auto it = pending_.find(id);
    if (it == pending_.end()) {
      fail_all("printed '" + runtime::one_line(line) + "', an answer to no open request (id " + std::to_string(id) +
               "): a stray line");
      return false;
    }
    const Pending p = it->second;
    pending_.erase(it);
    last_answer_ = Clock::now();
    if (p.episode.empty()) continue;  // a close, acknowledged
    EnvEvent event{p.episode, p.reset, {}, std::nullopt};
    if (!read_answer(parsed, p.reset, event.answer, problem)) {
      fail_all("answered '" + runtime::one_line(line) + "' for episode " + p.episode + ": " + problem);
      return false;
    }
    ready_.push_back(std::move(event));
  }
  return true;
}

}  // namespace tandem::env
