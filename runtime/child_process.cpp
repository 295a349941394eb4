// Spawning a helper command behind a guardian process (fork + exec, async-signal-safe calls only
// between them), and teardown that always kills and reaps the command's whole process group.
#include "runtime/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "common/error.h"

extern char** environ;

namespace tandem::runtime {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kStderrTailBytes = 4096;

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
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
// it dies (MPI_Abort, SIGKILL, a crash), so no helper outlives its rank. Its exit status is
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

std::string one_line(const std::string& text, size_t max) {
  std::string s = text.size() > max ? text.substr(0, max) + "..." : text;
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

void ChildProcess::start(const std::string& command, const std::string& what, bool forward_stderr) {
  stop(false);
  ignore_sigpipe_once();
  forward_stderr_ = forward_stderr;
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
  std::string sh = "sh", dash_c = "-c", text = command;
  char* argv[] = {sh.data(), dash_c.data(), text.data(), nullptr};
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    for (int fd : {in_pipe[0], in_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    throw UserError(what + ": cannot start /bin/sh: " + std::strerror(err));
  }
  if (pid == 0) run_guardian(parent, in_pipe[0], out_pipe[1], err_pipe[1], argv);  // never returns
  // The parent sets the group too, so a kill of the group right after start cannot precede the
  // child's own setpgid (EACCES once the child has exec'd: it did it already).
  ::setpgid(pid, pid);
  ::close(in_pipe[0]), ::close(out_pipe[1]), ::close(err_pipe[1]);
  pid_ = pid;
  in_fd_ = in_pipe[1];
  out_fd_ = out_pipe[0];
  err_fd_ = err_pipe[0];
  for (int fd : {in_fd_, out_fd_, err_fd_}) set_nonblocking(fd);
  err_tail_.clear();
}

void ChildProcess::close_stdin() { close_fd(in_fd_); }

void ChildProcess::drain_stderr() {
  char buf[4096];
  while (err_fd_ >= 0) {
    const ssize_t n = ::read(err_fd_, buf, sizeof(buf));
    if (n > 0) {
      if (forward_stderr_) (void)!::write(STDERR_FILENO, buf, static_cast<size_t>(n));
      err_tail_.append(buf, static_cast<size_t>(n));
      if (err_tail_.size() > kStderrTailBytes) err_tail_.erase(0, err_tail_.size() - kStderrTailBytes);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
      close_fd(err_fd_);  // EOF (or a broken pipe): nothing more will come
    } else if (errno != EINTR) {
      return;  // drained for now
    }
  }
}

std::string ChildProcess::stderr_summary() const {
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

std::string ChildProcess::stop(bool graceful, std::chrono::milliseconds grace) {
  if (pid_ < 0) return "";
  close_fd(in_fd_);  // EOF on stdin: a well-behaved child exits by itself
  std::string how;
  int status = 0;
  if (graceful) {
    const auto until = Clock::now() + grace;
    for (;;) {
      drain_stderr();
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
  drain_stderr();
  close_fd(out_fd_);
  close_fd(err_fd_);
  pid_ = -1;
  return how;
}

}  // namespace tandem::runtime
