// What the jail's attacks share: a cgroup v2 directory and a host workspace of their own per
// test, and a running jail whose stdout, stderr and status channel are read with deadlines,
// so no test can hang on a jail that misbehaves.
//
// The jail runs the probe (probe.c), copied into the workspace and bound with --ro, as
// kProgramUid/kProgramGid. Every test needs root and cgroup v2; without them it skips, saying
// which is missing.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/unique_fd.hpp"

namespace airlock::microvm_jail_test {

inline constexpr uid_t kProgramUid = 61000;
inline constexpr gid_t kProgramGid = 61001;
inline constexpr auto kPatience = std::chrono::seconds(10);

// The mount point of the cgroup v2 hierarchy (the unified one on a hybrid host), if any.
std::optional<std::string> cgroup2_mount();
// The mount point of a cgroup v1 hierarchy (a hybrid host's memory, pids, …), if any.
std::optional<std::string> cgroup1_mount();
// The pids in `directory`/cgroup.procs.
std::vector<pid_t> cgroup_pids(const std::string& directory);
// True when `pid` names no process, not even a zombie (kill(pid, 0) fails with ESRCH).
bool gone(pid_t pid);
// /proc/PID/comm without its newline ("" when gone).
std::string command_name(pid_t pid);

// A cgroup of its own below the v2 root; everything in it is killed and it is removed when
// this ends.
class TestCgroup {
 public:
  explicit TestCgroup(const std::string& root);
  ~TestCgroup();
  TestCgroup(const TestCgroup&) = delete;
  TestCgroup& operator=(const TestCgroup&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A host directory /tmp/airlock-microvm-jail-XXXXXX holding bin/probe (a copy of the probe),
// ro/ and rw/ (rw/ owned by the program's uid); removed whole when this ends.
class Workspace {
 public:
  Workspace();
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  const std::string& root() const { return root_; }
  std::string probe() const { return root_ + "/bin/probe"; }
  std::string read_only() const { return root_ + "/ro"; }
  std::string read_write() const { return root_ + "/rw"; }

 private:
  std::string root_;
};

struct Outcome {
  int exit_code = -1;  // the jail's exit status (128 + N for a signal); -1: it had to be killed
  std::string out;     // the program's stdout
  std::string err;     // the jail's and the program's stderr
  std::string status;  // what the status channel said
};

// Descriptors the jail is started with besides 0-4: `target` in the jail is a duplicate of
// `source` in the test, without close-on-exec.
struct ExtraFd {
  int target;
  int source;
};

// One jail, started by start_jail. Destroying it kills what is left (the jail's root, whose
// death ends the rest through the warden's parent-death signal) and reaps it.
class RunningJail {
 public:
  RunningJail(pid_t pid, base::UniqueFd leash, base::UniqueFd out, base::UniqueFd err,
              base::UniqueFd status);
  ~RunningJail();
  RunningJail(RunningJail&& other) noexcept;
  RunningJail& operator=(RunningJail&&) = delete;

  pid_t pid() const { return pid_; }
  // Waits for a stdout line starting with `prefix`; returns it, or nothing at the deadline.
  std::optional<std::string> await_output(const std::string& prefix);
  // Waits for a status line starting with `prefix`.
  std::optional<std::string> await_status(const std::string& prefix);
  void close_leash() { leash_.reset(); }
  // Waits (kPatience at most) for the jail to end and for its outputs' end of file.
  Outcome finish();

 private:
  // Reads what is ready; false once the deadline has passed.
  bool pump(std::chrono::steady_clock::time_point deadline);
  std::optional<std::string> await_line(const std::string& text_of, const std::string& prefix);

  pid_t pid_;
  base::UniqueFd leash_;
  base::UniqueFd out_, err_, status_;
  Outcome outcome_;
  bool reaped_ = false;
};

// Starts the jail binary with `arguments`, stdin /dev/null, fd 3 the read end of a leash (the
// test holds the write end) and fd 4 the write end of the status channel.
RunningJail start_jail(const std::vector<std::string>& arguments,
                       const std::vector<ExtraFd>& extra = {});

class JailTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // --leash 3 --status-fd 4 --cgroup DIR --uid U --gid G --ro PROBE, then `options`, then
  // -- PROBE and `commands`.
  std::vector<std::string> arguments(const std::vector<std::string>& options,
                                     const std::vector<std::string>& commands) const;
  RunningJail start(const std::vector<std::string>& options,
                    const std::vector<std::string>& commands,
                    const std::vector<ExtraFd>& extra = {});
  Outcome run(const std::vector<std::string>& options, const std::vector<std::string>& commands,
              const std::vector<ExtraFd>& extra = {});

  std::optional<TestCgroup> cgroup_;
  std::optional<Workspace> workspace_;
};

// The line of `text` that starts with `prefix` (without its newline), or "" when none does.
std::string line_starting(const std::string& text, const std::string& prefix);

}  // namespace airlock::microvm_jail_test
