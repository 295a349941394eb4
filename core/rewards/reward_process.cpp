// The external reward process: spawn, pipelined request/answer exchange under poll() with a
// per-answer deadline, and teardown that always kills and reaps the child's whole process group.
#include "core/rewards/reward_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>

#include "common/error.h"

extern char** environ;

namespace tandem::rewards {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kStderrTailBytes = 4096;
constexpr size_t kShownChars = 120;
// How long a child may take to exit by itself after EOF on its stdin before it is killed.
constexpr auto kExitGrace = std::chrono::milliseconds(1000);

// A dead child must surface as EPIPE from write(), not as SIGPIPE ending the trainer. A handler
// someone else installed is left alone.
void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      sigaction(SIGPIPE, &ignore, nullptr);
    }
  });
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::string shown(const std::string& text) {
  std::string s = text.size() > kShownChars ? text.substr(0, kShownChars) + "..." : text;
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "stopped (status " + std::to_string(status) + ")";
}

std::string request_line(const RewardInput& in) {
  const nlohmann::json j{{"prompt", in.prompt}, {"response", in.response}, {"answer", in.answer},
                         {"index", in.sample_index}};
  // Responses are valid UTF-8 by the tokenizer's contract; replace rather than throw regardless.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// The reward in one answer line, or an explanation of what is wrong with it.
bool parse_answer(std::string line, double& reward, std::string& problem) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded()) {
    // Python's json.dumps writes NaN / Infinity, which are not JSON.
    const bool non_finite = line.find("NaN") != std::string::npos || line.find("Infinity") != std::string::npos;
    problem = non_finite ? "not JSON (NaN and Infinity are not JSON numbers; a reward must be finite)" : "not JSON";
  } else if (!j.is_object()) {
    problem = "not a JSON object";
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
  problem = "answered '" + shown(line) + "': " + problem + " (expected {\"reward\": <number>})";
  return false;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

RewardProcess::RewardProcess(RewardProcessOptions options) : options_(std::move(options)) {
  if (options_.command.empty()) throw UserError("reward command: the command is empty");
  if (!(options_.timeout_s > 0) || !std::isfinite(options_.timeout_s))
    throw UserError("reward command '" + options_.command + "': timeout_s must be a finite number > 0, got " +
                    std::to_string(options_.timeout_s));
  ignore_sigpipe_once();
  start();
}

RewardProcess::~RewardProcess() { stop(true); }

void RewardProcess::start() {
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    ::close(in_pipe[0]), ::close(in_pipe[1]);
    throw std::system_error(errno, std::generic_category(), "pipe2");
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1]}) ::close(fd);
    throw std::system_error(errno, std::generic_category(), "pipe2");
  }

  // posix_spawn rather than fork(): safe in a multi-threaded process and cheap for a large one.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Own process group, so a timeout kills the script's children too; default SIGPIPE and an
  // empty signal mask, so the child behaves as if started from a shell.
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::string sh = "sh", dash_c = "-c", command = options_.command;
  char* argv[] = {sh.data(), dash_c.data(), command.data(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(in_pipe[0]), ::close(out_pipe[1]), ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(in_pipe[1]), ::close(out_pipe[0]), ::close(err_pipe[0]);
    throw UserError("reward command '" + options_.command + "': cannot start /bin/sh: " + std::strerror(rc));
  }
  pid_ = pid;
  in_fd_ = in_pipe[1];
  out_fd_ = out_pipe[0];
  err_fd_ = err_pipe[0];
  for (int fd : {in_fd_, out_fd_, err_fd_}) set_nonblocking(fd);
  out_buffer_.clear();
  err_tail_.clear();
}

void RewardProcess::read_stderr() {
  char buf[4096];
  while (err_fd_ >= 0) {
    const ssize_t n = ::read(err_fd_, buf, sizeof(buf));
    if (n > 0) {
      if (options_.forward_stderr) (void)!::write(STDERR_FILENO, buf, static_cast<size_t>(n));
      err_tail_.append(buf, static_cast<size_t>(n));
      if (err_tail_.size() > kStderrTailBytes) err_tail_.erase(0, err_tail_.size() - kStderrTailBytes);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
      close_fd(err_fd_);  // EOF (or a broken pipe): nothing more will come
    } else if (errno != EINTR) {
      return;  // drained for now
    }
  }
}

std::string RewardProcess::stderr_summary() const {
  // The last few non-empty lines: usually the exception or message that explains the failure.
  std::vector<std::string> lines;
  std::istringstream in(err_tail_);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  if (lines.empty()) return "";
  std::string tail;
  for (size_t i = lines.size() > 3 ? lines.size() - 3 : 0; i < lines.size(); ++i)
    tail += (tail.empty() ? "" : " | ") + lines[i];
  if (tail.size() > 400) tail = "..." + tail.substr(tail.size() - 400);
  return "; its stderr ends with: " + tail;
}

std::string RewardProcess::stop(bool graceful) {
  if (pid_ < 0) return "";
  close_fd(in_fd_);  // EOF on stdin: a well-behaved child exits by itself
  std::string how;
  int status = 0;
  if (graceful) {
    const auto until = Clock::now() + kExitGrace;
    for (;;) {
      read_stderr();
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) {
        how = r == pid_ ? describe_status(status) : "ended";
        break;
      }
      if (Clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  kill(-pid_, SIGKILL);  // the whole group: the shell and anything it started
  if (how.empty()) {
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    how = "was still running and was killed";
  }
  read_stderr();
  close_fd(out_fd_);
  close_fd(err_fd_);
  pid_ = -1;
  return how;
}

void RewardProcess::fail(int64_t sample_index, const std::string& what, bool child_ended) {
  std::string message = "reward command '" + options_.command + "' " + what;
  const std::string how = stop(child_ended);
  if (child_ended) message += " (it " + how + ")";
  message += " at sample " + std::to_string(sample_index) + stderr_summary();
  throw UserError(message);
}

void RewardProcess::check_unsolicited(int64_t first_index) {
  // Output left over from the previous batch (an extra line) would silently shift every reward
  // of this batch by one sample.
  char buf[4096];
  const ssize_t n = ::read(out_fd_, buf, sizeof(buf));
  if (n > 0) out_buffer_.append(buf, static_cast<size_t>(n));
  if (!out_buffer_.empty())
    fail(first_index, "printed output before its request ('" + shown(out_buffer_) + "')", false);
}

std::vector<double> RewardProcess::score(const std::vector<RewardInput>& inputs) {
  std::vector<double> rewards;
  if (inputs.empty()) return rewards;
  if (pid_ < 0) start();
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
      if (!parse_answer(out_buffer_.substr(0, nl), reward, problem)) fail(current(), problem, false);
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
    fds[count++] = {out_fd_, POLLIN, 0};
    const bool writing = in_fd_ >= 0 && written < pending.size();
    if (writing) fds[count++] = {in_fd_, POLLOUT, 0};
    if (err_fd_ >= 0) fds[count++] = {err_fd_, POLLIN, 0};
    const int ready = poll(fds, count, static_cast<int>(std::min<int64_t>(left + 1, 1 << 30)));
    if (ready < 0 && errno != EINTR) throw std::system_error(errno, std::generic_category(), "poll");
    if (ready <= 0) continue;

    if (err_fd_ >= 0) read_stderr();
    if (writing && fds[1].revents != 0) {
      const ssize_t n = ::write(in_fd_, pending.data() + written, pending.size() - written);
      if (n > 0) {
        written += static_cast<size_t>(n);
      } else if (n < 0 && errno == EPIPE) {
        // The child stopped reading; collect what it did answer, then the EOF below names the sample.
        close_fd(in_fd_);
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        throw std::system_error(errno, std::generic_category(), "write to reward command");
      }
    }
    if (fds[0].revents != 0) {
      char buf[8192];
      const ssize_t n = ::read(out_fd_, buf, sizeof(buf));
      if (n > 0) {
        out_buffer_.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        // A final answer without its newline still counts as malformed output, not a silent loss.
        const std::string what = out_buffer_.empty() ? "closed its stdout before answering"
                                                     : "closed its stdout after a partial line '" +
                                                           shown(out_buffer_) + "'";
        fail(current(), what, true);
      }
    }
  }
  if (!out_buffer_.empty())
    fail(inputs.back().sample_index, "printed more lines than there were samples ('" + shown(out_buffer_) + "')",
         false);
  if (written < pending.size())
    fail(inputs.back().sample_index, "answered before reading every request", false);
  return rewards;
}

}  // namespace tandem::rewards
