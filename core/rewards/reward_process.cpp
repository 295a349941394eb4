// The external reward process: spawn (with a guardian that ends the command's process group when
// the rank dies), pipelined request/answer exchange under poll() with a per-answer deadline, and
// teardown that always kills and reaps the child's whole process group.
#include "core/rewards/reward_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
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
  problem = "answered '" + shown(line) + "': " + problem + " (expected {\"index\": " + std::to_string(index) +
            ", \"reward\": <number>})";
  return false;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// The guardian's handler: the rank died (parent-death signal) or asked it to go: take the whole
// process group (the shell and everything it started) down with it.
void kill_group(int) {
  ::kill(0, SIGKILL);
  ::_exit(128 + SIGKILL);
}

// The forked child: leader of a new process group, it starts the command (/bin/sh -c) in that
// group and waits for it. The kernel signals it when the rank that started it dies, however
// it dies (MPI_Abort, SIGKILL, a crash), so no reward process outlives its rank. Its exit status is
// the command's. Only async-signal-safe calls here (we are a fork of a multi-threaded process).
[[noreturn]] void run_guardian(pid_t parent, int in_fd, int out_fd, int err_fd, char** argv) {
  ::setpgid(0, 0);
  struct sigaction on_death {};
  on_death.sa_handler = kill_group;
  sigemptyset(&on_death.sa_mask);
  // A real-time signal nobody else sends (SLURM's SIGUSR1 / SIGTERM go to the ranks, see [12]).
  const int death = SIGRTMIN + 2;
  ::sigaction(death, &on_death, nullptr);
  ::prctl(PR_SET_PDEATHSIG, death);
  if (::getppid() != parent) kill_group(0);  // the rank died before prctl took effect
  // The command's pipes become 0, 1, 2 and every other descriptor of the rank (its ends of these
  // pipes, other children's pipes, MPI's sockets) is closed, so EOF still reaches whom it should.
  ::dup2(in_fd, STDIN_FILENO), ::dup2(out_fd, STDOUT_FILENO), ::dup2(err_fd, STDERR_FILENO);
  if (::syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
    for (int fd = 3; fd < 65536; ++fd) ::close(fd);
  sigset_t none;
  sigemptyset(&none);
  const pid_t child = ::fork();
  if (child < 0) ::_exit(127);
  if (child == 0) {
    // The command: default signal dispositions and mask, as if started from a shell.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig : {SIGPIPE, SIGRTMIN + 2}) ::sigaction(sig, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve("/bin/sh", argv, environ);
    ::_exit(127);
  }
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) ::close(fd);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(WTERMSIG(status), &dfl, nullptr);
    ::kill(::getpid(), WTERMSIG(status));  // the command's own death, for the message
  }
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

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

  // fork + exec rather than posix_spawn, because the child must set up a guardian: between fork
  // and exec only async-signal-safe calls run (setpgid, prctl, sigaction, dup2, fork, execve,
  // waitpid, kill, _exit), which is what a multi-threaded parent allows.
  std::string sh = "sh", dash_c = "-c", command = options_.command;
  char* argv[] = {sh.data(), dash_c.data(), command.data(), nullptr};
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    throw UserError("reward command '" + options_.command + "': cannot start /bin/sh: " + std::strerror(err));
  }
  if (pid == 0) run_guardian(parent, in_pipe[0], out_pipe[1], err_pipe[1], argv);  // never returns
  ::close(in_pipe[0]), ::close(out_pipe[1]), ::close(err_pipe[1]);
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
        const std::string what = out_buffer_.empty()
                                     ? "closed its stdout before answering"
                                     : "closed its stdout after a partial line '" + shown(out_buffer_) + "'";
        fail(current(), what, true);
      }
    }
  }
  if (!out_buffer_.empty())
    fail(inputs.back().sample_index, "printed more lines than there were samples ('" + shown(out_buffer_) + "')",
         false);
  if (written < pending.size()) fail(inputs.back().sample_index, "answered before reading every request", false);
  return rewards;
}

}  // namespace tandem::rewards
