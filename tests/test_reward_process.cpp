// The external reward process with real children (sh scripts): correct answers over several
// batches, and a crash, a timeout, garbage and protocol slips each ending in a UserError that
// names the sample, fast, with the child killed and reaped.
#include <catch2/catch.hpp>

#include "fixtures.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "core/rewards/reward_process.h"

using namespace tandem;
using namespace tandem::rewards;
namespace fs = std::filesystem;

namespace {

// A private directory per test case (test::TempDir) with a script writer.
struct TempDir : test::TempDir {
  TempDir() : test::TempDir("tandem_reward") {}
  const fs::path path{str()};
  // Returns the command that runs `script` with sh.
  std::string script(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return "sh " + (path / name).string();
  }
};

RewardProcessOptions quiet(const std::string& command, double timeout_s = 10.0) {
  return RewardProcessOptions{command, timeout_s, false};
}

std::vector<RewardInput> batch(int64_t first_index, int64_t count, const std::string& payload = "x") {
  std::vector<RewardInput> inputs;
  for (int64_t i = 0; i < count; ++i)
    inputs.push_back({"prompt " + payload, "response \"quoted\"\n" + payload, "answer", first_index + i});
  return inputs;
}

// True once `pid` names no process at all (a zombie still answers kill(pid, 0)).
bool gone(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// True once no live (non-zombie) process is left in process group `pgid`. Orphaned grandchildren
// are reaped by init, which a container may not run, so zombies there do not count.
bool group_gone(pid_t pgid) {
  for (int i = 0; i < 200; ++i) {
    bool live = false;
    for (const auto& entry : fs::directory_iterator("/proc")) {
      std::ifstream stat(entry.path() / "stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      const size_t close = line.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 2));
      char state = 0;
      long ppid = 0, pgrp = 0;
      rest >> state >> ppid >> pgrp;
      live |= pgrp == pgid && state != 'Z';
    }
    if (!live) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// sh: the request's index, read back from the JSON line $line with sed, into $idx.
#define TANDEM_IDX "idx=$(printf '%s\\n' \"$line\" | sed -n 's/.*\"index\":\\(-*[0-9]*\\).*/\\1/p'); "

// The reward is the request's index + 0.5; the answer echoes the index, as the protocol asks.
const char* kEchoIndex =
    "while IFS= read -r line; do\n"
    "  " TANDEM_IDX
    "echo \"{\\\"index\\\": $idx, \\\"reward\\\": $idx.5, \\\"note\\\": \\\"ok\\\"}\"\n"
    "done\n";

// One well-formed answer line for the request in $line (sh).
const std::string kAnswer = TANDEM_IDX "echo \"{\\\"index\\\": $idx, \\\"reward\\\": 1}\"";

std::string error_of(RewardProcess& process, const std::vector<RewardInput>& inputs) {
  try {
    process.score(inputs);
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no error>";
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("a reward process answers batch after batch from one child", "[rewards][process]") {
  TempDir dir;
  RewardProcess process(quiet(dir.script("echo.sh", kEchoIndex)));
  const pid_t pid = process.child_pid();
  REQUIRE(pid > 0);
  CHECK(process.score(batch(0, 3)) == std::vector<double>{0.5, 1.5, 2.5});
  CHECK(process.score(batch(40, 2)) == std::vector<double>{40.5, 41.5});
  CHECK(process.score({}).empty());
  CHECK(process.child_pid() == pid);  // long-lived
}

TEST_CASE("the request lines carry the sample's fields as JSON", "[rewards][process]") {
  if (!fs::exists("/usr/bin/python3")) return;
  TempDir dir;
  std::ofstream(dir.path / "check.py")
      << "import json, sys\n"
         "for line in sys.stdin:\n"
         "    r = json.loads(line)\n"
         "    ok = r['response'] == r['answer'] and r['prompt'] == 'p' and isinstance(r['index'], int)\n"
         "    print(json.dumps({'index': r['index'], 'reward': 1.0 if ok else 0.0}), flush=True)\n";
  RewardProcess process(quiet("/usr/bin/python3 " + (dir.path / "check.py").string()));
  const std::vector<RewardInput> inputs{{"p", "a\"b\\\n\xc3\xa9", "a\"b\\\n\xc3\xa9", 0}, {"p", "x", "y", 1}};
  CHECK(process.score(inputs) == std::vector<double>{1.0, 0.0});
}

TEST_CASE("a large pipelined batch does not deadlock", "[rewards][process]") {
  // The child answers while we are still writing: ~12 MB of requests and ~0.4 MB of answers, far
  // more than a pipe holds in either direction.
  if (!fs::exists("/usr/bin/python3")) return;
  TempDir dir;
  std::ofstream(dir.path / "ones.py")
      << "import json, sys\n"
         "for line in iter(sys.stdin.readline, ''):\n"
         "    i = json.loads(line)['index']\n"
         "    print(json.dumps({'index': i, 'reward': 1, 'pad': 'p' * 120}), flush=True)\n";
  RewardProcess process(quiet("/usr/bin/python3 " + (dir.path / "ones.py").string()));
  const auto rewards = process.score(batch(0, 3000, std::string(2000, 'z')));
  CHECK(rewards.size() == 3000);
  CHECK(rewards.back() == 1.0);
}

TEST_CASE("a child that crashes mid-batch is a UserError naming the sample", "[rewards][process]") {
  TempDir dir;
  const std::string command = dir.script("crash.sh",
                                         "n=0\n"
                                         "while IFS= read -r line; do\n"
                                         "  n=$((n + 1))\n"
                                         "  if [ $n -eq 3 ]; then echo 'boom: cannot score this' >&2; exit 3; fi\n"
                                         "  " +
                                             kAnswer +
                                             "\n"
                                             "done\n");
  RewardProcess process(quiet(command));
  const pid_t pid = process.child_pid();
  const std::string error = error_of(process, batch(10, 5));
  CHECK_THAT(error, Catch::Contains("reward command '" + command + "'"));
  CHECK_THAT(error, Catch::Contains("sample 12"));
  CHECK_THAT(error, Catch::Contains("exited with status 3"));
  CHECK_THAT(error, Catch::Contains("boom: cannot score this"));
  CHECK(process.child_pid() == -1);
  CHECK(gone(pid));  // reaped, not a zombie

  // The next call starts a fresh child.
  CHECK(process.score(batch(0, 2)) == std::vector<double>{1.0, 1.0});
  CHECK(process.child_pid() != pid);
}

TEST_CASE("a child that never answers times out fast, with its process group killed", "[rewards][process]") {
  TempDir dir;
  RewardProcess process(quiet(dir.script("slow.sh", "IFS= read -r line; " + kAnswer +
                                                        "\n"
                                                        "IFS= read -r line; sleep 30; " +
                                                        kAnswer + "\n"),
                              2.0));  // the first answer's deadline also covers the child's start-up
  const pid_t pid = process.child_pid();
  const auto start = std::chrono::steady_clock::now();
  const std::string error = error_of(process, batch(7, 3));
  CHECK(seconds_since(start) < 8.0);
  CHECK_THAT(error, Catch::Contains("timed out after 2 s") && Catch::Contains("sample 8"));
  CHECK(gone(pid));
  CHECK(group_gone(pid));  // the `sleep 30` the script started too
}

TEST_CASE("malformed answers are UserErrors naming the sample and the line", "[rewards][process]") {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"hello there", "answered 'hello there': not JSON"},
      {"{\"index\": 5, \"score\": 1}", "no \"reward\" key"},
      {"{\"index\": 5, \"reward\": \"1\"}", "\"reward\" is not a number"},
      {"{\"index\": 5, \"reward\": true}", "\"reward\" is not a number"},
      {"{\"index\": 5, \"reward\": 1e999}", "not JSON"},
      {"{\"index\": 5, \"reward\": NaN}", "NaN and Infinity are not JSON"},
      {"{\"reward\": 1}", "no integer \"index\" key"},
      {"{\"index\": \"5\", \"reward\": 1}", "no integer \"index\" key"},
      {"{\"index\": 4, \"reward\": 1}", "the answer is for index 4 but request 5 was next"},
      {"[1]", "not a JSON object"},
      {"", "answered '': not JSON"},
  };
  TempDir dir;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string name = "bad" + std::to_string(i) + ".txt";
    std::ofstream(dir.path / name) << cases[i].first << "\n";
    RewardProcess process(quiet("IFS= read -r line; " + kAnswer + "; while IFS= read -r line; do cat " +
                                (dir.path / name).string() + "; done"));
    const pid_t pid = process.child_pid();
    const std::string error = error_of(process, batch(4, 3));
    CHECK_THAT(error, Catch::Contains(cases[i].second) && Catch::Contains("at sample 5"));
    CHECK(gone(pid));
  }
}

TEST_CASE("exiting early, a missing program, and extra lines are caught", "[rewards][process]") {
  {
    RewardProcess process(quiet("exit 0"));
    const auto big = batch(0, 200, std::string(5000, 'q'));  // more than a pipe holds: EPIPE, no SIGPIPE
    CHECK_THAT(error_of(process, big), Catch::Contains("closed its stdout before answering") &&
                                           Catch::Contains("exited with status 0") && Catch::Contains("sample 0"));
  }
  {
    RewardProcess process(quiet("tandem_no_such_reward_program_xyz"));
    CHECK_THAT(error_of(process, batch(3, 1)),
               Catch::Contains("status 127") && Catch::Contains("not found") && Catch::Contains("sample 3"));
  }

  {
    RewardProcess process(quiet("IFS= read -r line; printf '{\"reward\": 1}'"));  // no newline, then EOF
    CHECK_THAT(error_of(process, batch(0, 1)), Catch::Contains("after a partial line '{\"reward\": 1}'"));
  }
}

TEST_CASE("a stray answer line is caught on every run, never paired with the wrong sample", "[rewards][process]") {
  // Each answer echoes its request's index, so detection does not depend on when the stray line
  // arrives (the race that let a shifted run pass before). 20 runs of each, every one must fail.
  for (int run = 0; run < 20; ++run) {
    INFO("run " << run);
    {  // two answers to every request: within a batch, the second line has the wrong index
      RewardProcess process(quiet("while IFS= read -r line; do " + kAnswer + "; " + kAnswer + "; done"));
      CHECK_THAT(error_of(process, batch(10, 3)),
                 Catch::Contains("the answer is for index 10 but request 11 was next"));
    }
    {  // a batch of one: the extra line is caught by this call when it arrives with the answer (one
       // read took both lines), else by the next call, whatever its timing
      RewardProcess process(quiet("while IFS= read -r line; do " + kAnswer + "; " + kAnswer + "; done"));
      const std::string first = error_of(process, batch(0, 1));
      if (first == "<no error>") {
        CHECK_THAT(error_of(process, batch(1, 1)), Catch::Contains("printed output before its request") ||
                                                       Catch::Contains("the answer is for index 0 but request 1"));
      } else {
        CHECK_THAT(first, Catch::Contains("printed more lines than there were samples"));
      }
    }
    {  // one line printed at start, before any request
      RewardProcess process(quiet("echo '{\"reward\": 0.5}'; while IFS= read -r line; do " + kAnswer + "; done"));
      CHECK_THAT(error_of(process, batch(0, 2)),
                 Catch::Contains("no integer \"index\" key") || Catch::Contains("printed output before its request"));
    }
  }
}

TEST_CASE("destruction reaps the child, even one that ignores EOF", "[rewards][process]") {
  pid_t pid = -1;
  {
    RewardProcess process(quiet("cat >/dev/null"));
    pid = process.child_pid();
  }
  CHECK(gone(pid));
  const auto start = std::chrono::steady_clock::now();
  {
    RewardProcess process(quiet("trap '' TERM HUP; while :; do sleep 1; done"));
    pid = process.child_pid();
  }
  CHECK(seconds_since(start) < 3.0);
  CHECK(gone(pid));
  CHECK(group_gone(pid));
}

TEST_CASE("bad options are UserErrors", "[rewards][process]") {
  CHECK_THROWS_WITH(RewardProcess(quiet("")), Catch::Contains("command is empty"));
  CHECK_THROWS_WITH(RewardProcess(quiet("cat", 0.0)), Catch::Contains("timeout_s must be"));
  CHECK_THROWS_AS(RewardProcess(quiet("cat", -1.0)), UserError);
}
